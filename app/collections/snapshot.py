"""In-memory evaluation snapshots: a collection's pool, rankings and grades as arrays, kept current.

A leaderboard reads every ranking row and every grade cell of a collection. Reading them from
the database on every recompute costs seconds on a DL-sized collection, so each process keeps one
snapshot per collection and brings it up to date on use, within the caller's session:

* the collection's ``structure_token`` changed (queries, pool, systems or rankings were written):
  the whole snapshot is rebuilt;
* its ``revision`` moved: only the grade rows written after the revision the snapshot has seen
  are read and applied (see app/collections/revision.py for why that misses nothing);
* neither: nothing is read but the collection row.

Rubric versions and judges' overrides are small and are applied per request on top of the
grades (``app.leaderboards.service``). Frames handed out are copies, safe to use while another
thread refreshes the snapshot.
"""

from __future__ import annotations

import gc
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np
from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from app.collections import queries
from app.collections.queries import GraderRef, PoolKeys
from app.evaluation.frame import NO_RATING, GradeFrame, PoolIndex, RankingFrame
from app.models import Collection, Grade, Grader, RankingEntry, System

MAX_SNAPSHOTS = 8  # collections kept per process, least recently used dropped first
# cells as columns: entry positions, item ids, self-ratings, correct flags
GradeColumns = tuple[list[int], list[str], list[int | None], list[bool | None]]


@dataclass(frozen=True, slots=True)
class Structure:
    """What only structural writes change: the pool and the systems' rankings."""

    token: str
    pool: PoolKeys
    index: PoolIndex
    rankings: RankingFrame
    position: dict[int, int]  # pool entry pk → entry position in ``index``


def load_structure(session: Session, collection: Collection, token: str) -> Structure:
    collection_id = collection.id
    pool = queries.pool_keys(session, collection)
    index = PoolIndex.from_pairs(pool.keys.values())
    position = {pk: e for e, pk in enumerate(pool.keys)}
    systems = dict(
        session.execute(
            select(System.id, System.name).where(System.collection_id == collection_id).order_by(System.id)
        ).all()
    )
    system_position = {pk: s for s, pk in enumerate(systems)}
    rows = core_rows(
        session,
        select(RankingEntry.system_pk, RankingEntry.pool_entry_pk, RankingEntry.rank, RankingEntry.score)
        .join(System, System.id == RankingEntry.system_pk)
        .where(System.collection_id == collection_id),
    )
    system_pks, entry_pks, ranks, scores = _columns(rows, 4)
    rankings = RankingFrame(
        index,
        tuple(systems.values()),
        np.asarray([system_position[pk] for pk in system_pks], dtype=np.int64),
        np.asarray([position[pk] for pk in entry_pks], dtype=np.int64),
        np.asarray(ranks, dtype=np.int64),
        np.asarray(scores, dtype=np.float64),
    )
    return Structure(token, pool, index, rankings, position)


class GradeStore:
    """One grader's cells in growable arrays; applying a row again overwrites its cell."""

    def __init__(self, grader: GraderRef) -> None:
        self.grader = grader
        self.items: list[str] = []
        self._item_code: dict[str, int] = {}
        self._cell_of: dict[int, int] = {}  # entry << 32 | item code → cell
        self._columns = {
            "entry": np.empty(0, np.int64),
            "item": np.empty(0, np.int64),
            "rating": np.empty(0, np.int64),
            "correct": np.empty(0, bool),
        }
        self.size = 0

    def apply(self, cells: GradeColumns) -> None:
        """Upsert cells given as columns: entry positions, item ids, self-ratings, correct flags."""
        entries, item_ids, ratings, correct = cells
        item_code, cell_of = self._item_code, self._cell_of
        # setdefault(key, len(d)) numbers new keys 0, 1, 2, … in the order they first appear
        codes = [item_code.setdefault(item_id, len(item_code)) for item_id in item_ids]
        self.items.extend(list(item_code)[len(self.items) :])
        index = [cell_of.setdefault(e << 32 | c, len(cell_of)) for e, c in zip(entries, codes, strict=True)]
        self._grow(len(cell_of))
        at = np.asarray(index, dtype=np.int64)
        self._columns["entry"][at] = entries
        self._columns["item"][at] = codes
        self._columns["rating"][at] = [NO_RATING if r is None else r for r in ratings]
        self._columns["correct"][at] = [bool(c) for c in correct]
        self.size = len(cell_of)

    def _grow(self, size: int) -> None:
        capacity = len(self._columns["entry"])
        if size <= capacity:
            return
        capacity = max(size, 2 * capacity, 1024)
        for name, column in self._columns.items():
            grown = np.zeros(capacity, dtype=column.dtype)
            grown[: len(column)] = column
            self._columns[name] = grown

    def frame(self, pool: PoolIndex) -> GradeFrame:
        entry, item, rating, correct = (self._columns[name][: self.size].copy() for name in self._columns)
        return GradeFrame(pool, tuple(self.items), entry, item, rating, correct, self.grader.is_self_rated)


class CollectionSnapshot:
    """One collection's structure and, per grader asked for so far, its grades."""

    def __init__(self, collection_id: int, structure: Structure, revision: int, graders: list[GraderRef]) -> None:
        self.collection_id = collection_id
        self.structure = structure
        self.revision = revision
        self.graders = {g.id: g for g in graders}
        self.stores: dict[int, GradeStore] = {}
        self.stale = False  # set when a refresh saw rows of a newer structure than its own
        self.lock = threading.Lock()

    def grader_list(self) -> list[GraderRef]:
        """The graders with grades in the collection, oldest first."""
        return [self.graders[pk] for pk in sorted(self.graders)]

    def grades(self, session: Session, grader_pk: int) -> GradeFrame:
        """The grader's cells as a frame (a copy), loading them on first use."""
        with self.lock:
            store = self.stores.get(grader_pk)
            if store is None:
                store = self.stores[grader_pk] = GradeStore(self.graders[grader_pk])
                rows = core_rows(session, _grade_rows(self.collection_id).where(Grade.grader_pk == grader_pk))
                store.apply(self._positioned(rows))
            return store.frame(self.structure.index)

    def apply_changes(self, session: Session, revision: int) -> None:
        """Read the grade rows written after the revision seen so far and apply them."""
        rows = core_rows(session, _grade_rows(self.collection_id).where(Grade.revision > self.revision))
        new = {row[0] for row in rows} - set(self.graders)
        if new:
            self.graders.update(
                (g.id, GraderRef.of(g)) for g in session.scalars(select(Grader).where(Grader.id.in_(new)))
            )
        for grader_pk, store in self.stores.items():
            store.apply(self._positioned([row for row in rows if row[0] == grader_pk]))
        self.revision = revision

    def _positioned(self, rows: Sequence[tuple[Any, ...]]) -> GradeColumns:
        """(grader, entry pk, item, rating, correct) rows → cell columns with entry positions."""
        position = self.structure.position
        known = [row for row in rows if row[1] in position]
        if len(known) < len(rows):  # written after a structural change this snapshot predates: rebuild next time
            self.stale = True
        _, entry_pks, item_ids, ratings, correct = _columns(known, 5)
        return [position[pk] for pk in entry_pks], item_ids, ratings, correct


def _grade_rows(collection_id: int) -> Select[int, int, str, int | None, bool | None]:
    return select(Grade.grader_pk, Grade.pool_entry_pk, Grade.item_id, Grade.self_rating, Grade.correct).where(
        Grade.collection_id == collection_id
    )


def core_rows(session: Session, statement: Select[*tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """All rows as the driver's plain tuples.

    For 100k+ rows, building SQLAlchemy's Row objects (and the ORM's loading step) costs more than
    the fetch itself; the selected columns need no result processing (ints, strings, floats, and
    booleans that may arrive as 0/1).
    """
    result = session.connection().execute(statement)
    try:
        rows = list(result.cursor.fetchall())
    finally:
        result.close()
    return rows


def _columns(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    return [list(map(itemgetter(i), rows)) for i in range(width)]


_snapshots: OrderedDict[tuple[str, int], CollectionSnapshot] = OrderedDict()
_snapshots_lock = threading.Lock()


def current(session: Session, collection: Collection) -> CollectionSnapshot:
    """The collection's snapshot, brought up to date with what ``session`` can see."""
    revision, token = session.execute(
        select(Collection.revision, Collection.structure_token).where(Collection.id == collection.id)
    ).one()
    key = (session.get_bind().engine.url.render_as_string(hide_password=True), collection.id)
    with _snapshots_lock:
        snapshot = _snapshots.get(key)
        if snapshot is not None:
            _snapshots.move_to_end(key)
    if snapshot is not None:
        with snapshot.lock:
            if snapshot.structure.token == token and not snapshot.stale:
                if snapshot.revision != revision:
                    snapshot.apply_changes(session, revision)
                return snapshot
    graders = [GraderRef.of(g) for g in queries.graders_of(session, collection)]
    snapshot = CollectionSnapshot(collection.id, load_structure(session, collection, token), revision, graders)
    with _snapshots_lock:
        _snapshots[key] = snapshot
        while len(_snapshots) > MAX_SNAPSHOTS:
            _snapshots.popitem(last=False)
    _settle_heap()
    return snapshot


def _settle_heap() -> None:
    """Move the long-lived snapshot objects out of the cyclic collector's way.

    A DL-size snapshot holds ~245k long-lived objects; every full collection walked them all
    (~135 ms), which was the p95 of the grid, agreement and leaderboard pages. ``unfreeze`` first,
    so that a replaced snapshot can still be freed; one full collection per rebuild, which is rare.
    """
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def select_grader(
    session: Session, collection: Collection, *, model: str | None, prompt_class: str | None
) -> GraderRef:
    """The one grader with grades in the collection that matches the filters, from its snapshot's list."""
    return queries.match_grader(current(session, collection).grader_list(), model=model, prompt_class=prompt_class)


def clear() -> None:
    """Forget every snapshot (the next leaderboard reads its collection from the database again)."""
    with _snapshots_lock:
        _snapshots.clear()
        _answer_stores.clear()


# ---- answered cells (the verify view) --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AnsweredCells:
    """One grader's cells that carry a non-empty answer (extracted if stored, else raw), as arrays.

    Cell c is item ``items[item[c]]`` of pool entry ``entry[c]`` (positions of the snapshot's pool).
    """

    items: tuple[str, ...]
    entry: np.ndarray[Any, np.dtype[np.int64]]
    item: np.ndarray[Any, np.dtype[np.int64]]


class AnswerStore:
    """Whether each of one grader's cells has an answer; kept current like a ``GradeStore``.

    The verify view lists answered cells only; reading every answer text of a collection per
    request costs seconds at DL size, so the flags are kept and the texts read per page.
    """

    def __init__(self, token: str, revision: int) -> None:
        self.token, self.revision = token, revision
        self.items: list[str] = []
        self._item_code: dict[str, int] = {}
        self._answered: dict[int, bool] = {}  # entry << 32 | item code → has an answer
        self._cells: AnsweredCells | None = None  # built on first use after a change
        self.lock = threading.Lock()

    def apply(self, position: dict[int, int], rows: Sequence[tuple[Any, ...]]) -> None:
        """Upsert (entry pk, item id, answered) rows; entries unknown to the snapshot are skipped."""
        item_code, answered = self._item_code, self._answered
        for entry_pk, item_id, flag in rows:
            entry = position.get(entry_pk)
            if entry is not None:
                answered[entry << 32 | item_code.setdefault(item_id, len(item_code))] = bool(flag)
        self.items.extend(list(item_code)[len(self.items) :])
        self._cells = None

    def cells(self) -> AnsweredCells:
        if self._cells is None:
            keys = np.fromiter((key for key, flag in self._answered.items() if flag), dtype=np.int64)
            self._cells = AnsweredCells(tuple(self.items), keys >> 32, keys & 0xFFFFFFFF)
        return self._cells


_answer_stores: OrderedDict[tuple[str, int, int], AnswerStore] = OrderedDict()


def answered_cells(session: Session, collection: Collection, grader_pk: int) -> AnsweredCells:
    """The grader's answered cells in the collection's current snapshot, read once, then by revision."""
    from sqlalchemy import case, func

    current_snapshot = current(session, collection)
    structure, revision = current_snapshot.structure, current_snapshot.revision
    key = (session.get_bind().engine.url.render_as_string(hide_password=True), collection.id, grader_pk)
    answer = func.coalesce(Grade.extracted_answer, Grade.raw_answer)
    statement = select(Grade.pool_entry_pk, Grade.item_id, case((func.length(answer) > 0, 1), else_=0)).where(
        Grade.collection_id == collection.id, Grade.grader_pk == grader_pk
    )
    with _snapshots_lock:
        store = _answer_stores.get(key)
        if store is None or store.token != structure.token:
            store = _answer_stores[key] = AnswerStore(structure.token, -1)
        _answer_stores.move_to_end(key)
        while len(_answer_stores) > MAX_SNAPSHOTS:
            _answer_stores.popitem(last=False)
    with store.lock:
        if store.revision != revision:
            newer = statement if store.revision < 0 else statement.where(Grade.revision > store.revision)
            store.apply(structure.position, core_rows(session, newer))
            store.revision = revision
        return store.cells()


def judgment_extremes(session: Session, collection: Collection) -> tuple[Any, Any, Any]:
    """Per entry of the current snapshot's pool: whether it is judged, its lowest and its highest judgment.

    Unjudged entries read 0 (lowest) and -1 (highest). Read on every call, not kept: a re-import
    may rewrite judgments without moving the revision.
    """
    from app.models import Judgment, PoolEntry, Query

    structure = current(session, collection).structure
    rows = core_rows(
        session,
        select(Judgment.pool_entry_pk, Judgment.relevance)
        .join(PoolEntry, PoolEntry.id == Judgment.pool_entry_pk)
        .join(Query, Query.id == PoolEntry.query_pk)
        .where(Query.collection_id == collection.id),
    )
    position = structure.position
    known = [(position[pk], relevance) for pk, relevance in rows if pk in position]
    judged = np.zeros(structure.index.n_entries, dtype=bool)
    worst = np.full(structure.index.n_entries, np.iinfo(np.int64).max, dtype=np.int64)
    best = np.full(structure.index.n_entries, -1, dtype=np.int64)
    if known:
        entries, relevances = (np.asarray(column, dtype=np.int64) for column in zip(*known, strict=True))
        judged[entries] = True
        np.minimum.at(worst, entries, relevances)
        np.maximum.at(best, entries, relevances)
    worst[~judged] = 0
    return judged, worst, best


def worst_judgments(session: Session, collection: Collection) -> tuple[Any, Any]:
    """Per entry of the current snapshot's pool: whether it is judged, and its lowest judgment (0 if not)."""
    judged, worst, _ = judgment_extremes(session, collection)
    return judged, worst
