"""Judges' grades on cells: set, accept, clear and undo, each one logged with what it replaced.

A cell's *response* (the judge's grade, ``GradeOverride``) is kept apart from its *suggestion*
(the grader's ``Grade``); evaluation counts the response only when asked to. Every action writes
an ``OverrideEvent`` holding the state before and after, so that:

* undo restores exactly the previous state, and refuses (409) when someone else has changed the
  cell since, rather than overwrite their grade;
* two judges' latest answers on one cell can be compared (``app/review/agreement.py``);
* the grade the judge was shown (``model_rating``) is kept for judge-vs-grader agreement.

Services take a session and never commit; the route's unit of work does, and the ``overrides``
event is published after that commit so open leaderboards re-fetch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from functools import partial
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import after_commit
from app.errors import Conflict, Invalid, NotFound
from app.events import publish
from app.models import BankItem, Collection, Grade, GradeOverride, OverrideEvent, PoolEntry, Query
from app.models.base import utcnow
from app.review.queue import in_uniform_sample
from app.rubrics.service import lock_rubric

Action = Literal["set", "accept", "clear"]
Source = Literal["grid", "queue", "sample"]
SOURCES: tuple[Source, ...] = ("grid", "queue", "sample")
GRADES = range(6)


@dataclass(frozen=True, slots=True)
class CellState:
    """One cell after an action: the judge's grade (None: no override) next to the grader's."""

    pool_entry: int
    item_id: str
    rating: int | None
    judge: str | None
    at: str | None  # ISO time the override was last set
    model_rating: int | None
    event: int | None  # the action's log id (None for a plain read)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def overrides_event() -> dict[str, Any]:
    """Published after an override commit: pages that count overrides re-fetch (no revision moves)."""
    return {"type": "overrides"}


def check_cell(session: Session, collection: Collection, pool_entry_pk: int, item_id: str) -> None:
    """A cell of this collection: the pool entry and the item both belong to it."""
    entry_collection = session.scalar(
        select(Query.collection_id).join(PoolEntry, PoolEntry.query_pk == Query.id).where(PoolEntry.id == pool_entry_pk)
    )
    item = session.scalar(
        select(BankItem.id).where(BankItem.collection_id == collection.id, BankItem.item_id == item_id).limit(1)
    )
    if entry_collection != collection.id or item is None:
        raise NotFound("no such cell in this collection")


def model_rating(session: Session, grader_pk: int | None, pool_entry_pk: int, item_id: str) -> int | None:
    if grader_pk is None:
        return None
    return session.scalar(
        select(Grade.self_rating).where(
            Grade.grader_pk == grader_pk, Grade.pool_entry_pk == pool_entry_pk, Grade.item_id == item_id
        )
    )


def _current(session: Session, pool_entry_pk: int, item_id: str) -> GradeOverride | None:
    return session.scalar(
        select(GradeOverride).where(GradeOverride.pool_entry_pk == pool_entry_pk, GradeOverride.item_id == item_id)
    )


def _state(
    pool_entry_pk: int, item_id: str, row: GradeOverride | None, shown: int | None, event: int | None
) -> CellState:
    at = row.updated_at.isoformat() if row is not None and row.updated_at else None
    return CellState(
        pool_entry_pk,
        item_id,
        row.rating if row else None,
        row.judge if row else None,
        at,
        shown,
        event,
    )


def _write(session: Session, pool_entry_pk: int, item_id: str, rating: int | None, judge: str) -> GradeOverride | None:
    """Make the cell's override ``rating`` by ``judge`` (None deletes it); the caller holds the lock."""
    row = _current(session, pool_entry_pk, item_id)
    if rating is None:
        if row is not None:
            session.delete(row)
            session.flush()
        return None
    now = utcnow()
    if row is None:
        row = GradeOverride(pool_entry_pk=pool_entry_pk, item_id=item_id, created_at=now)
        session.add(row)
    row.rating, row.judge, row.updated_at = rating, judge, now
    session.flush()
    return row


def record(
    session: Session,
    collection: Collection,
    pool_entry_pk: int,
    item_id: str,
    *,
    action: Action,
    judge: str,
    rating: int | None = None,
    grader_pk: int | None = None,
    source: Source = "grid",
) -> CellState:
    """Apply one judge's action to one cell and log it; ``accept`` takes the grader's own grade.

    A ``sample`` action on a row beyond the front of the judge's uniform queue (a query filter, a
    skip, a hand-made POST) is logged as ``queue``: the server, not the page, keeps the PPI sample uniform.

    Invariant: override writers of a collection are serialised (the collection row lock, as for
    rubric saves), so the ``previous_*`` fields logged are the state this action replaced and an
    undo can check that nobody has changed the cell since.
    """
    if action == "set" and rating not in GRADES:
        raise Invalid("a grade is 0 to 5")
    check_cell(session, collection, pool_entry_pk, item_id)
    lock_rubric(session, collection)
    if source == "sample" and not in_uniform_sample(session, collection, judge, grader_pk, pool_entry_pk):
        source = "queue"  # a row the judge picked, not the seed: an ordinary review (PPI needs uniform rows)
    shown = model_rating(session, grader_pk, pool_entry_pk, item_id)
    if action == "accept":
        if shown is None:
            raise Invalid("this cell has no grade from the grader to accept")
        rating = shown
    if action == "clear":
        rating = None
    before = _current(session, pool_entry_pk, item_id)
    previous = (before.rating, before.judge) if before is not None else (None, None)
    row = _write(session, pool_entry_pk, item_id, rating, judge)
    event = OverrideEvent(
        collection_id=collection.id,
        pool_entry_pk=pool_entry_pk,
        item_id=item_id,
        judge=judge,
        action=action,
        rating=rating,
        previous_rating=previous[0],
        previous_judge=previous[1],
        model_rating=shown,
        grader_pk=grader_pk,
        source=source,
    )
    session.add(event)
    session.flush()
    after_commit(session, partial(publish, collection.id, overrides_event()))
    return _state(pool_entry_pk, item_id, row, shown, event.id)


def undo_last(session: Session, collection: Collection, judge: str) -> CellState:
    """Reverse ``judge``'s newest action in this collection that is not undone yet (repeat to go further back).

    Refused with a ``Conflict`` when the cell no longer holds what that action left (another judge
    changed it since): undo never overwrites someone else's grade.
    """
    lock_rubric(session, collection)
    event = session.scalar(
        select(OverrideEvent)
        .where(
            OverrideEvent.collection_id == collection.id,
            OverrideEvent.judge == judge,
            OverrideEvent.undone.is_(False),
        )
        .order_by(OverrideEvent.id.desc())
        .limit(1)
    )
    if event is None:
        raise NotFound("nothing to undo")
    now = _current(session, event.pool_entry_pk, event.item_id)
    if (now.rating if now else None) != event.rating or (now is not None and now.judge != judge):
        who = now.judge if now is not None else "someone"
        raise Conflict(f"the cell was changed by {who} since; undo would overwrite their grade")
    row = _write_previous(session, event)
    event.undone = True
    session.flush()
    after_commit(session, partial(publish, collection.id, overrides_event()))
    return _state(event.pool_entry_pk, event.item_id, row, event.model_rating, event.id)


def _write_previous(session: Session, event: OverrideEvent) -> GradeOverride | None:
    """Put back the override ``event`` replaced, under the judge who had set it."""
    if event.previous_rating is None:
        return _write(session, event.pool_entry_pk, event.item_id, None, event.judge)
    return _write(
        session, event.pool_entry_pk, event.item_id, event.previous_rating, event.previous_judge or event.judge
    )


def cell_state(
    session: Session, collection: Collection, pool_entry_pk: int, item_id: str, grader_pk: int | None
) -> CellState:
    check_cell(session, collection, pool_entry_pk, item_id)
    row = _current(session, pool_entry_pk, item_id)
    return _state(pool_entry_pk, item_id, row, model_rating(session, grader_pk, pool_entry_pk, item_id), None)


def last_set(at: datetime | None) -> str | None:
    """How a page prints when an override was set (UTC, to the minute)."""
    return at.strftime("%Y-%m-%d %H:%M UTC") if at is not None else None
