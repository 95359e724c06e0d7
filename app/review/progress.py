"""Review progress per judge and per query, from the override log (undone actions left out).

A judge has *reviewed* a cell when the judge's latest non-undone action on it set a grade (set or
accept; a clear withdraws the review). The review *accepted* the grader's grade when the rating
the judge left equals the grade the judge was shown (``model_rating``), else it *changed* it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import Collection, OverrideEvent, PoolEntry, Query

Cell = tuple[int, str]  # (pool entry pk, item id)


@dataclass(frozen=True, slots=True)
class Action:
    """A judge's latest non-undone action on one cell."""

    judge: str
    cell: Cell
    query_id: str
    action: str
    rating: int | None
    model_rating: int | None
    source: str
    at: datetime

    @property
    def reviewed(self) -> bool:
        return self.rating is not None

    @property
    def accepted(self) -> bool:
        return self.rating is not None and self.rating == self.model_rating


def log(session: Session, collection: Collection) -> list[Action]:
    """Every non-undone action of the collection, oldest first (one row per action)."""
    rows = session.execute(
        select(
            OverrideEvent.judge,
            OverrideEvent.pool_entry_pk,
            OverrideEvent.item_id,
            Query.query_id,
            OverrideEvent.action,
            OverrideEvent.rating,
            OverrideEvent.model_rating,
            OverrideEvent.source,
            OverrideEvent.created_at,
        )
        .join(PoolEntry, PoolEntry.id == OverrideEvent.pool_entry_pk)
        .join(Query, Query.id == PoolEntry.query_pk)
        .where(OverrideEvent.collection_id == collection.id, OverrideEvent.undone.is_(False))
        .order_by(OverrideEvent.id)
    ).all()
    return [Action(j, (pk, item), q, a, r, m, s, at) for j, pk, item, q, a, r, m, s, at in rows]


def latest(actions: list[Action]) -> dict[tuple[str, Cell], Action]:
    """(judge, cell) → that judge's latest action on it (``actions`` oldest first)."""
    return {(a.judge, a.cell): a for a in actions}


@dataclass(frozen=True, slots=True)
class JudgeProgress:
    judge: str
    reviewed: int  # cells the judge's latest action left rated
    accepted: int  # … with the grader's grade
    changed: int  # … with another grade
    queue: int  # of those, reviewed from the queue (priority order)
    sample: int  # of those, reviewed from the uniform sample
    last_at: str | None  # "YYYY-MM-DD HH:MM UTC"


@dataclass(frozen=True, slots=True)
class QueryProgress:
    query_id: str
    reviewed: int  # distinct cells some judge has reviewed
    in_queue: int  # cells of the query in the review queue (0: not graded by the grader)

    @property
    def fraction(self) -> float:
        return self.reviewed / self.in_queue if self.in_queue else 0.0


@dataclass(frozen=True, slots=True)
class Progress:
    judges: tuple[JudgeProgress, ...]
    queries: tuple[QueryProgress, ...]
    reviewed: int  # distinct cells reviewed by anyone
    in_queue: int


def summarise(actions: list[Action], in_queue: Mapping[str, int]) -> Progress:
    """Progress from the log (oldest first) and the queue's size per query."""
    by_cell = latest(actions)
    per_judge: dict[str, list[Action]] = {}
    for action in by_cell.values():
        per_judge.setdefault(action.judge, []).append(action)
    judges = tuple(_judge(judge, per_judge[judge]) for judge in sorted(per_judge))
    reviewed_cells: dict[str, set[Cell]] = {}
    for action in by_cell.values():
        if action.reviewed:
            reviewed_cells.setdefault(action.query_id, set()).add(action.cell)
    query_ids = list(in_queue) + sorted(set(reviewed_cells) - set(in_queue))
    queries = tuple(QueryProgress(q, len(reviewed_cells.get(q, ())), in_queue.get(q, 0)) for q in query_ids)
    total = len(set().union(*reviewed_cells.values())) if reviewed_cells else 0
    return Progress(judges, queries, total, sum(in_queue.values()))


def _judge(judge: str, actions: list[Action]) -> JudgeProgress:
    rated = [a for a in actions if a.reviewed]
    accepted = sum(a.accepted for a in rated)
    last = max((a.at for a in actions), default=None)
    return JudgeProgress(
        judge,
        len(rated),
        accepted,
        len(rated) - accepted,
        sum(a.source == "queue" for a in rated),
        sum(a.source == "sample" for a in rated),
        last.strftime("%Y-%m-%d %H:%M UTC") if last else None,
    )


def progress(session: Session, collection: Collection, in_queue: Mapping[str, int]) -> Progress:
    return summarise(log(session, collection), in_queue)
