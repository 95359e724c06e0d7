"""A rubric's history: the versions, what changed between two of them, and reverting to an older one.

A diff names items by their query and tells three kinds of change apart: an item that is new or
gone, an *edited* item (a new item whose ``info.edited_from`` chain leads back to an item of the
older version: edits give items new ids, so without the chain an edit would read as a removal
plus an addition), and a *moved* item (in both versions, at another place among its query's items).
An edited item also lists what changed in its importance, weight and sub-nuggets (``importance okay
→ vital``, ``sub-nugget added: …``, ``sub-nuggets and → or``); an item whose text stayed and only
those changed keeps its id, and is listed as edited with those changes alone.

A revert is a new version listing the older version's items; it regrades only the items the
newest version does not hold (the others are graded already), like an edit does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import Conflict, Invalid
from app.models import BankItem, Collection, Query, RubricVersion
from app.rubrics.editing import Attributes, EditResult, attribute_changes
from app.rubrics.service import create_version, latest_version, lock_rubric, version_by_number, version_item_pks

TIME_FORMAT = "%Y-%m-%d %H:%M UTC"


@dataclass(frozen=True, slots=True)
class VersionRow:
    number: int
    status: str
    by: str
    at: str
    note: str
    previous: int | None  # the published version before it: the history links the diff of the two


def version_rows(session: Session, collection: Collection) -> list[VersionRow]:
    """Every version, newest first, each with the published version it follows."""
    versions = list(
        session.scalars(
            select(RubricVersion).where(RubricVersion.collection_id == collection.id).order_by(RubricVersion.number)
        )
    )
    rows, previous = [], None
    for version in versions:
        rows.append(
            VersionRow(
                version.number,
                version.status,
                version.created_by,
                version.created_at.strftime(TIME_FORMAT),
                version.note,
                previous,
            )
        )
        if version.status == "published":
            previous = version.number
    return rows[::-1]


@dataclass(frozen=True, slots=True)
class DiffItem:
    query_id: str
    item_id: str
    text: str


@dataclass(frozen=True, slots=True)
class EditedItem:
    query_id: str
    old_item_id: str
    old_text: str
    new_item_id: str
    new_text: str
    changes: tuple[str, ...] = ()  # importance, weight, sub-nuggets; empty when only the text changed

    @property
    def text_changed(self) -> bool:
        return self.old_text != self.new_text


@dataclass(frozen=True, slots=True)
class MovedItem:
    query_id: str
    item_id: str
    text: str
    old_place: int  # 1-based among the query's items
    new_place: int


@dataclass(frozen=True, slots=True)
class VersionDiff:
    a: int
    b: int
    added: tuple[DiffItem, ...]
    removed: tuple[DiffItem, ...]
    edited: tuple[EditedItem, ...]
    moved: tuple[MovedItem, ...]

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.edited or self.moved)

    @property
    def summary(self) -> str:
        parts = [
            f"{len(self.edited)} edited",
            f"{len(self.added)} added",
            f"{len(self.removed)} removed",
            f"{len(self.moved)} moved",
        ]
        return ", ".join(p for p in parts if not p.startswith("0 ")) or "no differences in the items"


@dataclass(frozen=True, slots=True)
class _Item:
    query_id: str
    text: str
    edited_from: str | None
    attributes: Attributes
    content_hash: str


def _version_items(session: Session, collection: Collection, number: int) -> dict[str, _Item]:
    """item id → item, in the version's order (dicts keep it)."""
    pks = version_item_pks(session, version_by_number(session, collection, number))
    rows = {
        item.id: (
            item.item_id,
            _Item(query_id, item.text, _edited_from(item.info), Attributes.of(item), item.content_hash),
        )
        for item, query_id in session.execute(
            select(BankItem, Query.query_id).join(Query, Query.id == BankItem.query_pk).where(BankItem.id.in_(pks))
        )
    }
    return dict(rows[pk] for pk in pks if pk in rows)


def _edited_from(info: Any) -> str | None:
    source = info.get("edited_from") if isinstance(info, dict) else None
    return str(source) if source else None


def diff_versions(session: Session, collection: Collection, a: int, b: int) -> VersionDiff:
    """What changed from version ``a`` to version ``b`` (either may be the older one)."""
    old, new = _version_items(session, collection, a), _version_items(session, collection, b)
    origins = _origins(session, collection, old, new)
    edited, matched = [], set()
    for item_id, item in new.items():
        origin = origins.get(item_id)
        if item_id not in old and origin is not None:
            matched.add(origin)
            edited.append(_edited(old[origin], origin, item, item_id))
        elif item_id in old and old[item_id].content_hash != item.content_hash:  # same id: attributes changed
            edited.append(_edited(old[item_id], item_id, item, item_id))
    return VersionDiff(
        a,
        b,
        tuple(DiffItem(i.query_id, k, i.text) for k, i in new.items() if k not in old and k not in origins),
        tuple(DiffItem(i.query_id, k, i.text) for k, i in old.items() if k not in new and k not in matched),
        tuple(edited),
        tuple(_moved(old, new, origins)),
    )


def _edited(old: _Item, old_id: str, new: _Item, new_id: str) -> EditedItem:
    changes = attribute_changes(old.attributes, new.attributes)
    return EditedItem(new.query_id, old_id, old.text, new_id, new.text, changes)


def _origins(session: Session, collection: Collection, old: dict[str, _Item], new: dict[str, _Item]) -> dict[str, str]:
    """new item id → the item of ``old`` its chain of edits started from (through versions in between)."""
    fresh = [k for k in new if k not in old]
    if not fresh:
        return {}
    queries = {new[k].query_id for k in fresh}
    chain = {
        item_id: source
        for item_id, info in session.execute(
            select(BankItem.item_id, BankItem.info)
            .join(Query, Query.id == BankItem.query_pk)
            .where(BankItem.collection_id == collection.id, Query.query_id.in_(queries))
        )
        if (source := _edited_from(info)) is not None
    }
    found = {}
    for item_id in fresh:
        step, seen = item_id, set()
        while step in chain and step not in seen:
            seen.add(step)
            step = chain[step]
            if step in old and step not in new:
                found[item_id] = step
                break
    return found


def _moved(old: dict[str, _Item], new: dict[str, _Item], origins: dict[str, str]) -> list[MovedItem]:
    """Unedited items whose place among the query's items of both versions changed.

    An edited item holds its origin's place in that comparison, so editing one item never reads
    as moving the others; it is listed as edited, not as moved.
    """
    moved = []
    as_old = {k: origins.get(k, k) for k in new}  # new id → the id it had in ``old``
    for query_id in dict.fromkeys(i.query_id for i in new.values()):
        after = [k for k, i in new.items() if i.query_id == query_id and as_old[k] in old]
        shared = {as_old[k] for k in after}
        before = [k for k, i in old.items() if i.query_id == query_id and k in shared]
        moved += [
            MovedItem(query_id, k, new[k].text, before.index(k) + 1, place)
            for place, k in enumerate(after, 1)
            if k in old and before.index(k) + 1 != place
        ]
    return moved


@dataclass(frozen=True, slots=True)
class RevertPlan:
    """What reverting to ``target`` does: a new version ``number`` listing the target's items."""

    target: int
    current: int
    number: int
    items: int
    noun: str  # "questions", "nuggets" or "items"
    added_item_ids: tuple[str, ...]  # held by the target, not by the newest version: these get graded
    removed_item_ids: tuple[str, ...]


def revert_plan(session: Session, collection: Collection, number: int) -> RevertPlan:
    target = version_by_number(session, collection, number)
    if target.status != "published":
        raise Invalid(f"version {number} is a {target.status} version; only published versions can be restored")
    current = latest_version(session, collection)
    if current is None or current.number == number:
        raise Conflict(f"version {number} is the current rubric already: there is nothing to revert")
    wanted = _version_items(session, collection, number)
    now = _version_items(session, collection, current.number)
    kinds = set(session.scalars(select(BankItem.kind).where(BankItem.id.in_(version_item_pks(session, target)))))
    newest = session.scalar(
        select(RubricVersion.number)
        .where(RubricVersion.collection_id == collection.id)
        .order_by(RubricVersion.number.desc())
        .limit(1)
    )
    return RevertPlan(
        number,
        current.number,
        (newest or 0) + 1,
        len(wanted),
        f"{kinds.pop()}s" if len(kinds) == 1 else "items",
        tuple(k for k in wanted if k not in now),
        tuple(k for k in now if k not in wanted),
    )


def revert(session: Session, collection: Collection, number: int, *, user: str) -> EditResult:
    """Publish the items of version ``number`` as a new version; the result names the items to grade."""
    lock_rubric(session, collection)  # the plan reads the newest version after the lock, as a save does
    plan = revert_plan(session, collection, number)
    target = version_by_number(session, collection, number)
    version = create_version(
        session,
        collection,
        version_item_pks(session, target),
        created_by=user,
        note=f"revert to version {number}",
        bank_meta=target.bank_meta,
    )
    return EditResult(version, list(plan.added_item_ids), list(plan.removed_item_ids))
