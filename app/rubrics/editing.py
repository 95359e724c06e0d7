"""Rubric edits: each save makes a new immutable version and names exactly the items to regrade.

Concurrency: every change carries the text the editor saw (``expected_text``). If the newest
version holds another text for that item (or no longer holds it), the save is refused with an
``EditConflict`` that shows both texts; nothing is written. Edits of different items by two judges
merge cleanly, because each change is applied to the newest version.

An edited item gets a new id (``query_id/md5(text)``), so grades of older versions stay intact and
only the new item's cells need grading.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.collections.service import CollectionWriter
from app.models import BankItem, Collection, RubricVersion
from app.rubrics.service import ItemSpec, create_version, item_id_for, latest_version, store_items, version_item_pks

Action = Literal["edit", "add", "delete", "move"]


@dataclass(frozen=True, slots=True)
class ItemChange:
    action: Action
    query_id: str
    item_id: str | None = None  # edit, delete, move
    text: str | None = None  # edit, add
    gold_answers: tuple[str, ...] | None = None
    expected_text: str | None = None  # edit, delete: what the editor saw
    position: int | None = None  # move (0-based within the query's items), add (optional)
    kind: str = "question"


@dataclass
class EditConflict(Exception):
    item_id: str
    yours: str | None
    theirs: str | None
    message: str = ""

    def __str__(self) -> str:
        return self.message or f"item {self.item_id} was changed by someone else"


@dataclass
class EditResult:
    version: RubricVersion
    added_item_ids: list[str] = field(default_factory=list)  # new or edited: their cells need grading
    removed_item_ids: list[str] = field(default_factory=list)  # deleted or replaced: leaderboard only


class EmptyEdit(ValueError):
    pass


def apply_edit(
    session: Session,
    collection: Collection,
    changes: Sequence[ItemChange],
    *,
    user: str,
    note: str = "",
    require_note: bool = False,
) -> EditResult:
    """Apply the changes to the newest published version, as a new version by ``user``."""
    if require_note and not note.strip():
        raise ValueError("this deployment asks for a short reason with every rubric change")
    if not changes:
        raise EmptyEdit("nothing to save")
    base = latest_version(session, collection)
    order = version_item_pks(session, base)
    items = {item.id: item for item in session.scalars(select(BankItem).where(BankItem.id.in_(order)))}
    by_item_id = {items[pk].item_id: pk for pk in order}
    writer = CollectionWriter(session, collection)
    result_added: list[str] = []
    removed: list[str] = []
    for change in changes:
        order = _apply(session, collection, writer, change, order, items, by_item_id, result_added, removed)
    version = create_version(
        session,
        collection,
        order,
        created_by=user,
        note=note or _describe(changes),
        bank_meta=base.bank_meta if base else {},
    )
    return EditResult(version, result_added, removed)


def _check(change: ItemChange, by_item_id: dict[str, int], items: dict[int, BankItem]) -> int:
    pk = by_item_id.get(change.item_id or "")
    theirs = items[pk].text if pk is not None else None
    if pk is None or (change.expected_text is not None and theirs != change.expected_text):
        raise EditConflict(
            change.item_id or "",
            change.text if change.action == "edit" else change.expected_text,
            theirs,
            f"item {change.item_id} changed since you opened it: now {theirs!r}"
            if theirs is not None
            else f"item {change.item_id} was deleted since you opened it",
        )
    return pk


def _apply(
    session: Session,
    collection: Collection,
    writer: CollectionWriter,
    change: ItemChange,
    order: list[int],
    items: dict[int, BankItem],
    by_item_id: dict[str, int],
    added: list[str],
    removed: list[str],
) -> list[int]:
    if change.action == "add":
        if item_id_for(change.query_id, (change.text or "").strip()) in by_item_id:
            raise ValueError("the rubric already has this item")
        pk = _new_item(session, collection, writer, change, change.text or "")
        items[pk] = session.get_one(BankItem, pk)
        by_item_id[items[pk].item_id] = pk
        added.append(items[pk].item_id)
        return _insert_at(order, items, pk, change.position)
    old = _check(change, by_item_id, items)
    if change.action == "delete":
        removed.append(items[old].item_id)
        del by_item_id[items[old].item_id]
        return [pk for pk in order if pk != old]
    if change.action == "move":
        rest = [pk for pk in order if pk != old]
        return _insert_at(rest, items, old, change.position)
    text = (change.text or "").strip()
    if not text:
        raise ValueError("an item needs a text; delete it instead")
    gold = change.gold_answers if change.gold_answers is not None else tuple(items[old].gold_answers or ())
    new = _new_item(session, collection, writer, change, text, gold, previous=items[old])
    items[new] = session.get_one(BankItem, new)
    removed.append(items[old].item_id)
    del by_item_id[items[old].item_id]
    by_item_id[items[new].item_id] = new
    added.append(items[new].item_id)
    return [new if pk == old else pk for pk in order]


def _new_item(
    session: Session,
    collection: Collection,
    writer: CollectionWriter,
    change: ItemChange,
    text: str,
    gold: Sequence[str] | None = None,
    previous: BankItem | None = None,
) -> int:
    text = text.strip()
    if not text:
        raise ValueError("an item needs a text")
    if change.query_id not in writer.query_pks:
        raise LookupError(f"collection {collection.name!r} has no query {change.query_id!r}")
    gold = gold if gold is not None else change.gold_answers
    info = {"edited_from": previous.item_id} if previous else {"added": True}
    kind = previous.kind if previous else change.kind
    spec = ItemSpec(
        change.query_id,
        item_id_for(change.query_id, text),
        kind,
        text,
        list(gold) if gold else None,
        previous.facet_id if previous else None,
        info,
    )
    return store_items(session, collection, writer, [spec])[0]


def _insert_at(order: list[int], items: dict[int, BankItem], pk: int, position: int | None) -> list[int]:
    """Insert among the same query's items at ``position`` (end when None), keeping other queries' order."""
    same = [i for i, other in enumerate(order) if items[other].query_pk == items[pk].query_pk]
    if not same:
        return [*order, pk]
    index = same[-1] + 1 if position is None or position >= len(same) else same[max(position, 0)]
    return order[:index] + [pk] + order[index:]


def _describe(changes: Sequence[ItemChange]) -> str:
    counts: dict[str, int] = {}
    for change in changes:
        counts[change.action] = counts.get(change.action, 0) + 1
    return ", ".join(f"{action} {n}" for action, n in counts.items())
