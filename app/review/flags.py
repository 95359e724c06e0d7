"""Flags on spurious rubric items: set with who, when and why; removable; counted out of evaluation on request.

A flag belongs to an item id of a collection (every version that keeps the item keeps its flag).
Leaderboards leave flagged items out when asked (``exclude_flagged``), without a new rubric
version: a flag is a judge's opinion that an organizer can still overrule by unflagging.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.db import after_commit
from app.errors import NotFound
from app.events import publish
from app.models import BankItem, Collection, ItemFlag
from app.sqlutil import upsert


@dataclass(frozen=True, slots=True)
class Flag:
    item_id: str
    flagged_by: str
    reason: str
    at: str  # "YYYY-MM-DD HH:MM UTC"


def flags_event() -> dict[str, Any]:
    """Published after a flag or unflag commits: pages showing flags, or excluding them, re-fetch."""
    return {"type": "flags"}


def _check_item(session: Session, collection: Collection, item_id: str) -> None:
    found = session.scalar(
        select(BankItem.id).where(BankItem.collection_id == collection.id, BankItem.item_id == item_id).limit(1)
    )
    if found is None:
        raise NotFound(f"collection {collection.name!r} has no item {item_id!r}")


def flag_item(session: Session, collection: Collection, item_id: str, *, judge: str, reason: str = "spurious") -> None:
    _check_item(session, collection, item_id)
    upsert(
        session,
        ItemFlag,
        [{"collection_id": collection.id, "item_id": item_id, "flagged_by": judge, "reason": reason}],
        keys=["collection_id", "item_id"],
        update=["flagged_by", "reason"],
    )
    after_commit(session, partial(publish, collection.id, flags_event()))


def unflag_item(session: Session, collection: Collection, item_id: str) -> None:
    _check_item(session, collection, item_id)
    session.execute(delete(ItemFlag).where(ItemFlag.collection_id == collection.id, ItemFlag.item_id == item_id))
    after_commit(session, partial(publish, collection.id, flags_event()))


def flags(session: Session, collection: Collection) -> dict[str, Flag]:
    """item id → its flag, for every flagged item of the collection."""
    rows = session.scalars(select(ItemFlag).where(ItemFlag.collection_id == collection.id))
    return {
        f.item_id: Flag(f.item_id, f.flagged_by, f.reason or "", f.created_at.strftime("%Y-%m-%d %H:%M UTC"))
        for f in rows
    }


def flagged_ids(session: Session, collection: Collection) -> frozenset[str]:
    return frozenset(session.scalars(select(ItemFlag.item_id).where(ItemFlag.collection_id == collection.id)))
