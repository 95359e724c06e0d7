"""Rubric edits: each save makes a new immutable version and names exactly the items to regrade.

Concurrency: a save is a compare-and-swap on the rubric. ``apply_edit`` first takes the
collection's rubric lock (``lock_rubric``), then reads the newest version, checks every change
against it, and writes the new version, all in the caller's transaction. Every edit, move or
deletion carries the text the editor saw (``expected_text``, required). If the newest version holds
another text for that item, or no longer holds it (edited or deleted by someone else), the save is
refused with an ``EditConflict`` that shows both texts and says which of the two happened; nothing
is written. Edits of different items by two judges are both kept: the second save is applied to
the version the first one made.

An edited item gets a new id (``query_id/md5(text)``), so grades of older versions stay intact and
only the new item's cells need grading. An edit of an item's importance, weight or sub-nuggets alone
(text and gold answers as they were) keeps the item's id: grading reads neither, so its grades stay
valid and nothing is regraded; the new version differs in those attributes only. Such an edit may
carry ``expected_hash`` (the item's ``content_hash`` the editor saw), so that two judges changing
the attributes of one item at once conflict, as two changes of its text do.

Bounds of an edit (each refusal is an ``Invalid`` naming the field): a weight is a finite number
from 0 to ``WEIGHT_MAX`` (what an import takes); sub-nuggets combine with ``and`` or ``or``, at most
``MAX_CHILDREN`` per level, ``MAX_DEPTH`` levels and ``MAX_NODES`` in all, each text non-empty and
at most ``MAX_CHILD_TEXT`` characters.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.collections.nuggets_io import WEIGHT_MAX
from app.collections.schemas import ITEM_ID_MAX
from app.collections.service import CollectionWriter
from app.errors import Conflict, Invalid, NotFound
from app.models import BankItem, Collection, Query, RubricVersion, RubricVersionItem
from app.rubrics.service import (
    ItemSpec,
    create_version,
    item_id_for,
    latest_version,
    lock_rubric,
    store_items,
    version_item_pks,
)

Action = Literal["edit", "add", "delete", "move"]
OPS = ("and", "or")
MAX_CHILDREN = 50  # sub-nuggets of one item (or of one sub-nugget)
MAX_DEPTH = 4  # levels of sub-nuggets below the item
MAX_NODES = 200  # sub-nuggets of one item, all levels together
MAX_CHILD_TEXT = 2_000


@dataclass(frozen=True, slots=True)
class ChildEdit:
    """One sub-nugget as the editor left it; ``id`` names an existing one, which keeps its kind, gold
    answers, importance and (unless ``sub`` replaces them) its own sub-nuggets; no id adds one."""

    text: str
    id: str | None = None
    sub: StructureEdit | None = None


@dataclass(frozen=True, slots=True)
class StructureEdit:
    """An item's sub-nuggets after the edit: combined with ``op`` ("and" | "or"); none removes them."""

    op: str
    children: tuple[ChildEdit, ...] = ()


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
    importance: str | None = None  # edit: "vital" | "okay" | "" (unspecified); None keeps the item's
    weight: float | Literal[""] | None = None  # edit: a weight, "" (the importance's default); None keeps it
    structure: StructureEdit | None = None  # edit: the sub-nuggets; None keeps them
    expected_hash: str | None = None  # edit: the item's content_hash the editor saw (optional)


@dataclass
class EditConflict(Conflict):
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


class EmptyEdit(Invalid):
    pass


NEEDS_EXPECTED_TEXT = frozenset({"edit", "delete", "move"})


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
        raise Invalid("note: this deployment asks for a short reason with every rubric change")
    if not changes:
        raise EmptyEdit("nothing to save")
    for change in changes:
        if change.action in NEEDS_EXPECTED_TEXT and change.expected_text is None:
            raise Invalid(f"expected_text: a {change.action} must say which text it changes (reload the page)")
    lock_rubric(session, collection)  # taken before the newest version is read: the check and the write are one step
    base = latest_version(session, collection)
    order = version_item_pks(session, base)
    items = {item.id: item for item in session.scalars(select(BankItem).where(BankItem.id.in_(order)))}
    by_item_id = {items[pk].item_id: pk for pk in order}
    writer = CollectionWriter(session, collection)
    result_added: list[str] = []
    removed: list[str] = []
    phrases: list[str] = []
    for change in changes:
        before = _label(change, order, items, by_item_id)  # the item's place before the change moves it
        old_pk = by_item_id.get(change.item_id or "")
        index = order.index(old_pk) if old_pk is not None else None
        order = _apply(session, collection, writer, change, order, items, by_item_id, result_added, removed)
        phrase = _phrase(change, before, order, items, by_item_id)
        if change.action == "edit" and old_pk is not None and index is not None:
            phrase = _edit_phrase(phrase, items[old_pk], items[order[index]], before, change.query_id)
        phrases.append(phrase)
    version = create_version(
        session,
        collection,
        order,
        created_by=user,
        note=note.strip() or describe(phrases),
        bank_meta=base.bank_meta if base else {},
    )
    return EditResult(version, result_added, removed)


def _check(session: Session, change: ItemChange, by_item_id: dict[str, int], items: dict[int, BankItem]) -> int:
    """The item's primary key in the newest version, if it still holds the text the editor saw."""
    pk = by_item_id.get(change.item_id or "")
    if pk is not None and items[pk].text == change.expected_text:
        if change.expected_hash is not None and items[pk].content_hash != change.expected_hash:
            message = (
                f"item {change.item_id}'s importance, weight or sub-nuggets changed since you opened it "
                "(reload to see them)"
            )
            raise EditConflict(change.item_id or "", change.expected_text, items[pk].text, message)
        return pk
    yours = change.text if change.action == "edit" else change.expected_text
    if pk is not None:
        theirs = items[pk].text
        message = f"item {change.item_id} changed since you opened it: it now reads {theirs!r}"
        raise EditConflict(change.item_id or "", yours, theirs, message)
    successor = _successor(session, change, by_item_id, items)
    if successor is None:
        raise EditConflict(change.item_id or "", yours, None, f"item {change.item_id} was deleted since you opened it")
    text, editor = successor
    message = f"item {change.item_id} was edited by {editor} since you opened it: it now reads {text!r}"
    raise EditConflict(change.item_id or "", yours, text, message)


def _successor(
    session: Session, change: ItemChange, by_item_id: dict[str, int], items: dict[int, BankItem]
) -> tuple[str, str] | None:
    """(text, editor) of the item in the newest version that edits of ``change.item_id`` led to, if any.

    Edited items record ``info.edited_from``; the chain (over every item the query ever had) is
    followed until it reaches an item of the newest version. The editor is whoever published the
    first version holding that item.
    """
    history = session.scalars(
        select(BankItem).join(Query, Query.id == BankItem.query_pk).where(Query.query_id == change.query_id)
    )
    successors = {
        item.info["edited_from"]: item.item_id
        for item in history
        if isinstance(item.info, dict) and item.info.get("edited_from")
    }
    item_id, seen = change.item_id or "", set()
    while item_id in successors and item_id not in seen:
        seen.add(item_id)
        item_id = successors[item_id]
        pk = by_item_id.get(item_id)
        if pk is not None:
            editor = session.scalar(
                select(RubricVersion.created_by)
                .join(RubricVersionItem, RubricVersionItem.version_pk == RubricVersion.id)
                .where(RubricVersionItem.item_pk == pk)
                .order_by(RubricVersion.number)
                .limit(1)
            )
            return items[pk].text, editor or "someone else"
    return None


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
            raise Invalid("text: the rubric already has this item")
        pk = _new_item(session, collection, writer, change, change.text or "")
        items[pk] = session.get_one(BankItem, pk)
        by_item_id[items[pk].item_id] = pk
        added.append(items[pk].item_id)
        return _insert_at(order, items, pk, change.position)
    old = _check(session, change, by_item_id, items)
    if change.action == "delete":
        removed.append(items[old].item_id)
        del by_item_id[items[old].item_id]
        return [pk for pk in order if pk != old]
    if change.action == "move":
        rest = [pk for pk in order if pk != old]
        return _insert_at(rest, items, old, change.position)
    text = (change.text or "").strip()
    if not text:
        raise Invalid("text: an item needs a text; delete it instead")
    gold = change.gold_answers if change.gold_answers is not None else tuple(items[old].gold_answers or ())
    if _graded_as_before(items[old], text, gold):
        new = _new_item(session, collection, writer, change, text, gold, previous=items[old], keep_id=True)
        items[new] = session.get_one(BankItem, new)
        by_item_id[items[new].item_id] = new
        return [new if pk == old else pk for pk in order]  # same id: its grades hold, nothing to regrade
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
    keep_id: bool = False,
) -> int:
    """Store the item the change makes; ``keep_id``: the previous item with other attributes only."""
    text = text.strip()
    if not text:
        raise Invalid("text: an item needs a text")
    if change.query_id not in writer.query_pks:
        raise NotFound(f"collection {collection.name!r} has no query {change.query_id!r}")
    gold = gold if gold is not None else change.gold_answers
    if previous is not None and keep_id:
        item_id, info = previous.item_id, previous.info  # its edit chain (info.edited_from) stays as it was
    else:
        item_id = item_id_for(change.query_id, text)
        info = {"edited_from": previous.item_id} if previous else {"added": True}
    kind = previous.kind if previous else change.kind
    spec = ItemSpec(
        change.query_id,
        item_id,
        kind,
        text,
        list(gold) if gold else None,
        previous.facet_id if previous else None,
        info,
        # an edit keeps the item's importance, weight and sub-nuggets unless it sets them
        importance=_importance(change, previous),
        weight=_weight(change, previous),
        structure=_structure(change, previous, kind),
    )
    if previous is not None and keep_id and spec.content_hash() == previous.content_hash:
        raise EmptyEdit("nothing to save: the item is as it was")
    return store_items(session, collection, writer, [spec])[0]


def _graded_as_before(item: BankItem, text: str, gold: Sequence[str]) -> bool:
    """Whether an edit leaves what grading reads (text, gold answers) as it was."""
    return text == item.text and list(gold) == list(item.gold_answers or [])


def _importance(change: ItemChange, previous: BankItem | None) -> str | None:
    if change.importance is None:
        return previous.importance if previous else None
    if change.importance not in ("", "vital", "okay"):
        raise Invalid("importance: vital, okay, or empty for unspecified")
    return change.importance or None


def _weight(change: ItemChange, previous: BankItem | None) -> float | None:
    if change.weight is None:
        return previous.weight if previous else None
    if change.weight == "":
        return None
    if not (math.isfinite(change.weight) and 0 <= change.weight <= WEIGHT_MAX):
        raise Invalid(f"weight: a finite number from 0 to {WEIGHT_MAX:g}, or empty for the importance's default")
    return float(change.weight)


def _structure(change: ItemChange, previous: BankItem | None, kind: str) -> Any:
    if change.structure is None:
        return previous.structure if previous else None
    old = previous.structure if previous is not None and isinstance(previous.structure, dict) else {}
    built = _built(change.structure, old, (change.query_id, kind), "structure", depth=1, count=[0])
    return built if built["children"] else None


def _built(
    edit: StructureEdit, old: dict[str, Any], owner: tuple[str, str], field: str, depth: int, count: list[int]
) -> Any:
    """The structure JSON an edit describes, over the ``old`` one (whose children it may name by id)."""
    if edit.op not in OPS:
        raise Invalid(f"{field}.op: sub-nuggets combine with 'and' or 'or', got {edit.op[:20]!r}")
    if depth > MAX_DEPTH:
        raise Invalid(f"{field}: sub-nuggets nest at most {MAX_DEPTH} levels deep")
    if len(edit.children) > MAX_CHILDREN:
        raise Invalid(f"{field}.children: at most {MAX_CHILDREN} sub-nuggets, got {len(edit.children)}")
    known = {str(c.get("id")): c for c in old.get("children") or [] if isinstance(c, dict) and c.get("id")}
    children, seen = [], set()
    for i, child in enumerate(edit.children):
        where = f"{field}.children[{i}]"
        count[0] += 1
        if count[0] > MAX_NODES:
            raise Invalid(f"{where}: at most {MAX_NODES} sub-nuggets in one item")
        children.append(_built_child(child, known, owner, where, depth, count))
        if children[-1]["id"] in seen:
            raise Invalid(f"{where}.id: the sub-nugget {children[-1]['id']!r} is listed twice")
        seen.add(children[-1]["id"])
    return {**old, "op": edit.op, "children": children}


def _built_child(
    child: ChildEdit, known: dict[str, Any], owner: tuple[str, str], where: str, depth: int, count: list[int]
) -> dict[str, Any]:
    """``owner``: the item's (query id, kind); a new sub-nugget is of the item's kind."""
    text = child.text.strip()
    if not text:
        raise Invalid(f"{where}.text: a sub-nugget needs a text (remove it instead)")
    if len(text) > MAX_CHILD_TEXT or "\x00" in text:
        raise Invalid(f"{where}.text: at most {MAX_CHILD_TEXT} characters, no NUL")
    if child.id is not None and child.id not in known:
        raise Invalid(f"{where}.id: the item has no sub-nugget {child.id[:ITEM_ID_MAX]!r} (reload the page)")
    # a new sub-nugget gets an id from its text; an edited one keeps its id, so diffs show it edited
    query_id, kind = owner
    base = dict(known[child.id]) if child.id is not None else {"id": item_id_for(query_id, text), "kind": kind}
    base["text"] = text
    if child.sub is not None:
        sub = _built(child.sub, base, owner, f"{where}.sub", depth + 1, count)
        base = sub if sub["children"] else {k: v for k, v in base.items() if k not in ("op", "children")}
    return base


def _insert_at(order: list[int], items: dict[int, BankItem], pk: int, position: int | None) -> list[int]:
    """Insert among the same query's items at ``position`` (end when None), keeping other queries' order."""
    same = [i for i, other in enumerate(order) if items[other].query_pk == items[pk].query_pk]
    if not same:
        return [*order, pk]
    index = same[-1] + 1 if position is None or position >= len(same) else same[max(position, 0)]
    return order[:index] + [pk] + order[index:]


def _place(order: list[int], items: dict[int, BankItem], pk: int) -> str:
    """``q2``: the item's 1-based place among its query's items of its kind (``nugget 2`` for nuggets)."""
    item = items[pk]
    same = [other for other in order if items[other].query_pk == item.query_pk and items[other].kind == item.kind]
    number = same.index(pk) + 1 if pk in same else len(same) + 1
    return f"q{number}" if item.kind == "question" else f"{item.kind} {number}"


def _label(change: ItemChange, order: list[int], items: dict[int, BankItem], by_item_id: dict[str, int]) -> str:
    pk = by_item_id.get(change.item_id or "")
    return _place(order, items, pk) if pk is not None else "an item"


def _phrase(
    change: ItemChange, before: str, order: list[int], items: dict[int, BankItem], by_item_id: dict[str, int]
) -> str:
    """What one applied change did, in the words of the history page: ``edited q2 of bees``."""
    if change.action == "add":
        return f"added 1 {change.kind} to {change.query_id}"
    if change.action == "move":
        after = _place(order, items, by_item_id[change.item_id or ""])
        return f"moved {before} of {change.query_id} to {after}"
    verb = "edited" if change.action == "edit" else "deleted"
    return f"{verb} {before} of {change.query_id}"


MAX_NOTED_CHANGES = 3  # of one item's attributes in a version's note; the diff lists them all


def _edit_phrase(phrase: str, old: BankItem, new: BankItem, place: str, query_id: str) -> str:
    """``edited q2 of bees`` with the attributes it changed, or those alone when the text stayed."""
    changes = attribute_changes(Attributes.of(old), Attributes.of(new))
    if not changes:
        return phrase
    more = len(changes) - MAX_NOTED_CHANGES
    listed = ", ".join(changes[:MAX_NOTED_CHANGES]) + (f", and {more} more" if more > 0 else "")
    if old.text == new.text and old.gold_answers == new.gold_answers:
        return f"{place} of {query_id}: {listed}"
    return f"{phrase} ({listed})"


@dataclass(frozen=True, slots=True)
class Attributes:
    """What an item carries besides its text and gold answers: read by scores, not by grading."""

    importance: str | None
    weight: float | None
    structure: Any

    @classmethod
    def of(cls, item: BankItem) -> Attributes:
        return cls(item.importance, item.weight, item.structure)


def attribute_changes(old: Attributes, new: Attributes) -> tuple[str, ...]:
    """The changes, in the words of notes and diffs: ``importance okay → vital``, ``weight 1 → 2``,
    ``sub-nuggets and → or``, ``sub-nugget added: …``, ``sub-nugget removed: …``, ``sub-nugget edited: a → b``."""
    changes = []
    if old.importance != new.importance:
        changes.append(f"importance {old.importance or 'unspecified'} → {new.importance or 'unspecified'}")
    if old.weight != new.weight:
        changes.append(f"weight {_weight_text(old.weight)} → {_weight_text(new.weight)}")
    return (*changes, *_structure_changes(old.structure, new.structure, ""))


def _weight_text(weight: float | None) -> str:
    return "default" if weight is None else f"{weight:g}"


def _children(structure: Any) -> dict[str, dict[str, Any]]:
    children = structure.get("children") if isinstance(structure, dict) else None
    return {str(c.get("id") or c.get("text")): c for c in children or [] if isinstance(c, dict)}


def _structure_changes(old: Any, new: Any, prefix: str) -> list[str]:
    before, after = _children(old), _children(new)
    changes = []
    if before and after and old.get("op") != new.get("op"):
        changes.append(f"{prefix}sub-nuggets {old.get('op')} → {new.get('op')}")
    for key, child in after.items():
        if key not in before:
            changes.append(f"{prefix}sub-nugget added: {child.get('text')}")
            continue
        if before[key].get("text") != child.get("text"):
            changes.append(f"{prefix}sub-nugget edited: {before[key].get('text')} → {child.get('text')}")
        changes += _structure_changes(before[key], child, f"{prefix}under {child.get('text')}: ")
    changes += [f"{prefix}sub-nugget removed: {child.get('text')}" for key, child in before.items() if key not in after]
    return changes


MAX_PHRASES = 4  # a longer note lists the first ones and counts the rest


def describe(phrases: Sequence[str]) -> str:
    """A version's note when the editor gave none: the changes, with additions to a query counted together."""
    added: dict[tuple[str, str], int] = {}
    kept: list[str] = []
    for phrase in phrases:
        match = re.fullmatch(r"added 1 (\S+) to (.+)", phrase)
        if match is None:
            kept.append(phrase)
            continue
        if (match[1], match[2]) not in added:
            kept.append(phrase)  # a placeholder, rewritten with the count below
        added[(match[1], match[2])] = added.get((match[1], match[2]), 0) + 1
    counted = [_counted(phrase, added) for phrase in kept]
    if len(counted) > MAX_PHRASES:
        return "; ".join(counted[:MAX_PHRASES]) + f"; and {len(counted) - MAX_PHRASES} more changes"
    return "; ".join(counted) or "no change"


def _counted(phrase: str, added: dict[tuple[str, str], int]) -> str:
    match = re.fullmatch(r"added 1 (\S+) to (.+)", phrase)
    if match is None:
        return phrase
    n = added[(match[1], match[2])]
    return f"added {n} {match[1]}{'s' if n != 1 else ''} to {match[2]}"
