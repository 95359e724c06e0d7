"""In-memory evaluation snapshots: a collection's pool, rankings and grades as compact arrays, kept current.

A leaderboard reads every ranking row and every grade cell of a collection. Reading them from
the database on every recompute costs seconds on a DL-sized collection, so each process keeps one
snapshot per collection and brings it up to date on use, within the caller's session:

* the collection's ``structure_token`` changed (queries, pool, systems or rankings were written):
  the whole snapshot is rebuilt;
* its ``revision`` moved: only the grade rows written after the revision the snapshot has seen
  are read and applied (see app/collections/revision.py for why that misses nothing);
* neither: nothing is read but the collection row.

Memory (docs/snapshots.md): no per-cell or per-row Python objects. A grader's cells are three
columns sorted by the cell key ``entry << 32 | item code`` (int64 key, int8 rating, bool), upserted
with ``np.searchsorted``; rankings are int32 columns and float64 scores (trec's order depends on
them). Snapshots are kept least recently used first out, bounded by ``snapshot_memory_mb``.

A cold build reads a persisted copy (app/collections/snapshot_files.py) when one matches the
database, the collection's structure token and a revision not above the database's; else it
reads the database in chunks and writes the copy. Rubric versions and judges' overrides are small
and are applied per request on top of the grades (``app.leaderboards.service``). The manual
judgments are kept with the snapshot as columns and read again only when the collection's
``judgments_token`` moves (``manual_judgments``): a re-import rewrites them without a revision. Frames
handed out are int64 copies, safe to use while another thread refreshes the snapshot.
"""

from __future__ import annotations

import ctypes
import gc
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from app import collector
from app.collections import queries, snapshot_files
from app.collections.queries import GraderRef, PoolKeys
from app.config import get_settings
from app.evaluation.frame import NO_RATING, GradeFrame, PoolIndex, RankingFrame
from app.evaluation.types import Judgments
from app.models import Collection, Grade, Grader, Passage, PoolEntry, Query, RankingEntry, System

FETCH_ROWS = 50_000  # rows per fetchmany: a cold build holds one chunk of driver tuples at a time, not all
ITEM_BITS = 32  # a cell's key is entry << ITEM_BITS | item code
ITEM_MASK = (1 << ITEM_BITS) - 1
# cells as columns: entry positions, item ids, self-ratings, correct flags
GradeColumns = tuple[Sequence[int], Sequence[str], Sequence[int | None], Sequence[bool | None]]
Int64s = npt.NDArray[np.int64]
# honest estimates for what is not an array: a short str object plus its tuple slot, and a dict
# slot with boxed int key and value (the per-entry dicts built only for readers that ask for them)
STR_BYTES = 57
DICT_ENTRY_BYTES = 100


def _narrow(values: Int64s, dtype: type[np.signedinteger[Any]]) -> np.ndarray[Any, Any]:
    """``values`` in ``dtype`` if every value fits, else unchanged (hostile input stays exact)."""
    info = np.iinfo(dtype)
    if len(values) == 0 or (values.min() >= info.min and values.max() <= info.max):
        return values.astype(dtype, copy=False)
    return values


class Structure:
    """What only structural writes change: the pool and the systems' rankings, as arrays.

    Entry e of ``index`` is pool entry pk ``entry_pks[e]``. ``position`` (pk → entry) and ``pool``
    (pk → query and passage ids) are per-entry dicts, built on first use by the readers that need them.
    """

    def __init__(
        self, token: str, collection_id: int, index: PoolIndex, entry_pks: Int64s, rankings: RankingFrame
    ) -> None:
        self.token = token
        self.collection_id = collection_id
        self.index = index
        self.entry_pks = entry_pks
        self.rankings = rankings
        self._by_pk = np.argsort(entry_pks, kind="stable").astype(np.int32)
        self._sorted_pks = entry_pks[self._by_pk]
        self._position: dict[int, int] | None = None
        self.pool = PoolKeys(collection_id, self._pool_keys)
        names = (index.passage_ids, index.query_ids, rankings.systems)
        self._strings = sum(STR_BYTES * len(strings) + sum(map(len, strings)) for strings in names)

    def positions_of(self, pks: Any) -> Int64s:
        """Entry positions of pool entry pks; -1 where a pk is not in this pool."""
        wanted = np.asarray(pks, dtype=np.int64)
        if len(self._sorted_pks) == 0:
            return np.full(len(wanted), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self._sorted_pks, wanted), len(self._sorted_pks) - 1)
        return np.where(self._sorted_pks[at] == wanted, self._by_pk[at], -1).astype(np.int64)

    @property
    def position(self) -> dict[int, int]:
        """pool entry pk → entry position (built on first use)."""
        if self._position is None:
            self._position = dict(zip(self.entry_pks.tolist(), range(len(self.entry_pks)), strict=True))
        return self._position

    def _pool_keys(self) -> dict[int, tuple[str, str]]:
        query_ids, passage_ids = self.index.query_ids, self.index.passage_ids
        pairs = zip(self.entry_pks.tolist(), self.index.entry_query.tolist(), strict=True)
        return {pk: (query_ids[q], passage_ids[e]) for e, (pk, q) in enumerate(pairs)}

    def nbytes(self) -> int:
        r = self.rankings
        arrays = (self.entry_pks, self._by_pk, self._sorted_pks, self.index.entry_query, r.system, r.entry, r.rank)
        dict_entries = (self._position is not None) + 2 * self.pool.built  # the pool's values are tuples
        return (
            sum(a.nbytes for a in arrays)
            + r.score.nbytes
            + self._strings
            + dict_entries * DICT_ENTRY_BYTES * len(self.entry_pks)
        )

    def arrays(self) -> snapshot_files.Arrays:
        """The structure as named arrays (the persisted form)."""
        query_blob, query_ends = snapshot_files.pack_strings(self.index.query_ids)
        passage_blob, passage_ends = snapshot_files.pack_strings(self.index.passage_ids)
        system_blob, system_ends = snapshot_files.pack_strings(self.rankings.systems)
        r = self.rankings
        return {
            "entry_pks": self.entry_pks,
            "entry_query": self.index.entry_query,
            "query_blob": query_blob,
            "query_ends": query_ends,
            "passage_blob": passage_blob,
            "passage_ends": passage_ends,
            "system_blob": system_blob,
            "system_ends": system_ends,
            "r_system": r.system,
            "r_entry": r.entry,
            "r_rank": r.rank,
            "r_score": r.score,
        }

    @classmethod
    def from_arrays(cls, token: str, collection_id: int, a: snapshot_files.Arrays) -> Structure:
        """The structure from its persisted arrays; ValueError when they do not fit together."""
        index = PoolIndex(
            snapshot_files.unpack_strings(a["query_blob"], a["query_ends"]),
            a["entry_query"].astype(np.int64),
            snapshot_files.unpack_strings(a["passage_blob"], a["passage_ends"]),
        )
        systems = snapshot_files.unpack_strings(a["system_blob"], a["system_ends"])
        n_entries, n_rows = index.n_entries, len(a["r_entry"])
        columns = (a["r_system"], a["r_entry"], a["r_rank"], a["r_score"])
        if (
            len(a["entry_pks"]) != n_entries
            or len(index.entry_query) != n_entries
            or any(len(c) != n_rows for c in columns)
            or any(c.dtype.kind != "i" for c in (a["entry_pks"], *columns[:3]))
            or a["r_score"].dtype != np.float64
            or not _within(index.entry_query, len(index.query_ids))
            or not _within(a["r_entry"], n_entries)
            or not _within(a["r_system"], len(systems))
        ):
            raise ValueError("structure arrays do not fit together")
        structure = cls(
            token, collection_id, index, a["entry_pks"].astype(np.int64), RankingFrame(index, systems, *columns)
        )
        if n_entries > 1 and not bool(np.all(structure._sorted_pks[1:] > structure._sorted_pks[:-1])):
            raise ValueError("a pool entry pk appears twice")
        return structure


def _within(codes: np.ndarray[Any, Any], size: int) -> bool:
    return len(codes) == 0 or (int(codes.min()) >= 0 and int(codes.max()) < size)


def load_structure(session: Session, collection: Collection, token: str) -> Structure:
    """The collection's pool, systems and rankings from the database, read in chunks."""
    collection_id = collection.id
    entry_pks: list[int] = []
    entry_query: list[int] = []
    passage_ids: list[str] = []
    query_position: dict[str, int] = {}
    pool = (
        select(PoolEntry.id, Query.query_id, Passage.passage_id)
        .join(Query, Query.id == PoolEntry.query_pk)
        .join(Passage, Passage.id == PoolEntry.passage_pk)
        .where(Query.collection_id == collection_id)
        .order_by(Query.position, PoolEntry.position)
    )
    for chunk in fetch_chunks(session, pool):
        for pk, query_id, passage_id in chunk:
            entry_pks.append(pk)
            entry_query.append(query_position.setdefault(query_id, len(query_position)))
            passage_ids.append(passage_id)
    index = PoolIndex(tuple(query_position), np.asarray(entry_query, dtype=np.int64), tuple(passage_ids))
    systems = session.execute(
        select(System.id, System.name).where(System.collection_id == collection_id).order_by(System.id)
    ).all()
    system_pks = np.asarray([pk for pk, _ in systems], dtype=np.int64)
    structure = Structure(token, collection_id, index, np.asarray(entry_pks, dtype=np.int64), _no_rankings(index))
    blocks: list[tuple[np.ndarray[Any, Any], ...]] = []  # per chunk: int32 columns where they fit, float64 scores
    rows = (
        select(RankingEntry.system_pk, RankingEntry.pool_entry_pk, RankingEntry.rank, RankingEntry.score)
        .join(System, System.id == RankingEntry.system_pk)
        .where(System.collection_id == collection_id)
    )
    for chunk in fetch_chunks(session, rows):
        n = len(chunk)
        blocks.append(
            (
                _narrow(np.searchsorted(system_pks, np.fromiter(map(itemgetter(0), chunk), np.int64, n)), np.int32),
                _narrow(structure.positions_of(np.fromiter(map(itemgetter(1), chunk), np.int64, n)), np.int32),
                _narrow(np.fromiter(map(itemgetter(2), chunk), np.int64, n), np.int32),
                np.fromiter(map(itemgetter(3), chunk), np.float64, n),
            )
        )
    system, entry, rank, score = [np.concatenate(c) for c in zip(*blocks, strict=True)] if blocks else _empty_columns()
    rankings = RankingFrame(
        index,
        tuple(name for _, name in systems),
        _narrow(system, np.int32),
        _narrow(entry, np.int32),
        _narrow(rank, np.int32),
        score.astype(np.float64, copy=False),
    )
    # Rows in trec_eval's order once per structure (and so in its persisted copy): every later
    # evaluation then finds them sorted instead of sorting 3.2M rows again (RankingFrame.trec_order).
    order = rankings.trec_order()
    structure.rankings = RankingFrame(
        index, rankings.systems, rankings.system[order], rankings.entry[order], rankings.rank[order], score[order]
    )
    return structure


def _empty_columns() -> tuple[Int64s, Int64s, Int64s, npt.NDArray[np.float64]]:
    return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)


def _no_rankings(index: PoolIndex) -> RankingFrame:
    system, entry, rank, score = _empty_columns()
    return RankingFrame(index, (), system, entry, rank, score)


def fetch_chunks(session: Session, statement: Select[*tuple[Any, ...]]) -> Iterator[list[tuple[Any, ...]]]:
    """The statement's rows as the driver's plain tuples, ``FETCH_ROWS`` at a time (see ``core_rows``)."""
    result = session.connection().execute(statement)
    try:
        while chunk := result.cursor.fetchmany(FETCH_ROWS):
            yield list(chunk)
    finally:
        result.close()


class GradeStore:
    """One grader's cells as columns sorted by cell key; applying a row again overwrites its cell.

    Cell c grades entry ``keys[c] >> 32`` against item ``items[keys[c] & 0xFFFFFFFF]``. Item codes
    number item ids in the order they first arrive.
    """

    def __init__(self, grader: GraderRef) -> None:
        self.grader = grader
        self.items: list[str] = []
        self._item_code: dict[str, int] = {}
        self.keys: Int64s = np.zeros(0, np.int64)
        self.rating: np.ndarray[Any, Any] = np.zeros(0, np.int8)
        self.correct: npt.NDArray[np.bool_] = np.zeros(0, bool)

    @property
    def size(self) -> int:
        return len(self.keys)

    def item_codes(self, item_ids: Sequence[str]) -> npt.NDArray[np.int32]:
        item_code = self._item_code
        # setdefault(key, len(d)) numbers new keys 0, 1, 2, … in the order they first appear
        codes = np.fromiter((item_code.setdefault(i, len(item_code)) for i in item_ids), np.int32, len(item_ids))
        self.items.extend(list(item_code)[len(self.items) :])
        return codes

    def apply(self, cells: GradeColumns) -> None:
        """Upsert cells given as columns: entry positions, item ids, self-ratings, correct flags."""
        entries, item_ids, ratings, correct = cells
        n = len(entries)
        self.apply_arrays(
            np.fromiter(entries, np.int64, n),
            self.item_codes(item_ids),
            np.fromiter((NO_RATING if r is None else r for r in ratings), np.int64, n),
            np.fromiter((bool(c) for c in correct), bool, n),
        )

    def apply_arrays(
        self,
        entry: npt.NDArray[np.integer[Any]],
        code: npt.NDArray[np.integer[Any]],
        rating: Int64s,
        correct: npt.NDArray[np.bool_],
    ) -> None:
        """Upsert cells given as arrays; of cells repeated in one batch the last one wins, as in a database."""
        self.rating = _fitting(self.rating, rating)
        self.keys, (self.rating, self.correct) = upsert(
            self.keys, (self.rating, self.correct), entry.astype(np.int64) << ITEM_BITS | code, (rating, correct)
        )

    def frame(self, pool: PoolIndex) -> GradeFrame:
        """The cells as a frame of int64 copies (downstream code indexes and multiplies them freely)."""
        return GradeFrame(
            pool,
            tuple(self.items),
            self.keys >> ITEM_BITS,
            self.keys & ITEM_MASK,
            self.rating.astype(np.int64),
            self.correct.copy(),
            self.grader.is_self_rated,
        )

    def nbytes(self) -> int:
        strings = sum(STR_BYTES + len(i) for i in self.items) + DICT_ENTRY_BYTES * len(self.items)
        return self.keys.nbytes + self.rating.nbytes + self.correct.nbytes + strings

    def arrays(self) -> snapshot_files.Arrays:
        item_blob, item_ends = snapshot_files.pack_strings(self.items)
        return {
            "keys": self.keys,
            "rating": self.rating,
            "correct": self.correct,
            "item_blob": item_blob,
            "item_ends": item_ends,
        }

    @classmethod
    def from_arrays(cls, grader: GraderRef, a: snapshot_files.Arrays, n_entries: int) -> GradeStore:
        """The store from its persisted arrays; ValueError when they do not fit the structure."""
        store = cls(grader)
        store.items = list(snapshot_files.unpack_strings(a["item_blob"], a["item_ends"]))
        store._item_code = {item: code for code, item in enumerate(store.items)}
        keys, rating, correct = a["keys"], a["rating"], a["correct"]
        if (
            keys.dtype != np.int64
            or rating.dtype.kind != "i"
            or correct.dtype != np.bool_
            or not len(keys) == len(rating) == len(correct)
            or len(store._item_code) != len(store.items)
            or (len(keys) and not bool(np.all(keys[1:] > keys[:-1])))
            or not _within(keys >> ITEM_BITS, n_entries)
            or not _within(keys & ITEM_MASK, len(store.items))
        ):
            raise ValueError("grade arrays do not fit the structure")
        store.keys, store.rating, store.correct = keys, rating, correct
        return store


def _fitting(column: np.ndarray[Any, Any], values: Int64s) -> np.ndarray[Any, Any]:
    """``column`` widened if ``values`` do not fit its dtype (ratings are small; hostile ones stay exact)."""
    info = np.iinfo(column.dtype)
    if len(values) == 0 or (values.min() >= info.min and values.max() <= info.max):
        return column
    return column.astype(np.int64)


def upsert(
    keys: Int64s, columns: tuple[np.ndarray[Any, Any], ...], key: Int64s, values: tuple[np.ndarray[Any, Any], ...]
) -> tuple[Int64s, tuple[np.ndarray[Any, Any], ...]]:
    """Sorted ``keys`` and their ``columns`` with (``key``, ``values``) upserted: found keys overwritten, new inserted.

    Of keys repeated in one batch the last one wins, as rows applied in order would. O(n) per
    batch (one merge), no per-cell Python objects.
    """
    if len(key) == 0:
        return keys, columns
    order = np.argsort(key, kind="stable")
    key, values = key[order], tuple(v[order] for v in values)
    last = np.r_[key[1:] != key[:-1], True]
    key, values = key[last], tuple(v[last] for v in values)
    at = np.searchsorted(keys, key)
    found = at < len(keys)
    found[found] = keys[at[found]] == key[found]
    for column, value in zip(columns, values, strict=True):
        column[at[found]] = value[found]
    new = ~found
    if not new.any():
        return keys, columns
    return np.insert(keys, at[new], key[new]), tuple(
        np.insert(column, at[new], value[new]) for column, value in zip(columns, values, strict=True)
    )


GRADE_ARRAYS = ("keys", "rating", "correct", "item_blob", "item_ends")
STRUCTURE_ARRAYS = (
    "entry_pks",
    "entry_query",
    "query_blob",
    "query_ends",
    "passage_blob",
    "passage_ends",
    "system_blob",
    "system_ends",
    "r_system",
    "r_entry",
    "r_rank",
    "r_score",
)


class CollectionSnapshot:
    """One collection's structure and, per grader asked for so far, its grades."""

    def __init__(
        self,
        collection_id: int,
        structure: Structure,
        revision: int,
        graders: list[GraderRef],
        database: snapshot_files.Database | None = None,
    ) -> None:
        self.collection_id = collection_id
        self.structure = structure
        self.revision = revision
        self.graders = {g.id: g for g in graders}
        self.stores: dict[int, GradeStore] = {}
        self.stale = False  # set when a refresh saw rows of a newer structure than its own
        self.database = database  # where persisted files go and whose they are; None: keep none
        self.manual: ManualJudgments | None = None  # the judgments last read, under their token
        self.lock = threading.Lock()

    def grader_list(self) -> list[GraderRef]:
        """The graders with grades in the collection, oldest first."""
        return [self.graders[pk] for pk in sorted(self.graders)]

    def nbytes(self) -> int:
        """Memory held: arrays, plus estimates for the strings and the dicts built on demand."""
        manual = self.manual
        stores = sum(store.nbytes() for store in list(self.stores.values()))
        return self.structure.nbytes() + stores + (0 if manual is None else manual.nbytes())

    def grades(self, session: Session, grader_pk: int) -> GradeFrame:
        """The grader's cells as a frame (a copy), loading them on first use."""
        return self.grades_at(session, grader_pk)[0]

    def grades_at(self, session: Session, grader_pk: int) -> tuple[GradeFrame, int]:
        """The grader's cells as a frame (a copy) and the revision they are, read together under the lock.

        With the structure token and the grader, the revision names the frame's content: a kept
        result computed from it (a Cover table) is reused while all three stay the same.
        """
        with self.lock:
            store = self.stores.get(grader_pk)
            if store is None:
                store = self.stores[grader_pk] = self._load_store(session, grader_pk)
                loaded = True
            else:
                loaded = False
            frame, revision = store.frame(self.structure.index), self.revision
        if loaded:
            _evict()
        return frame, revision

    def _load_store(self, session: Session, grader_pk: int) -> GradeStore:
        """From the persisted file plus the rows above its revision, else from the database (then persisted)."""
        grader = self.graders[grader_pk]
        token = self.structure.token
        path = (
            None
            if self.database is None
            else snapshot_files.grades_path(self.database, self.collection_id, token, grader_pk)
        )
        if path is not None:
            store = self._read_store(session, path, grader)
            if store is not None:
                return store
        store = GradeStore(grader)
        self._apply_rows(
            store, fetch_chunks(session, _grade_rows(self.collection_id).where(Grade.grader_pk == grader_pk))
        )
        release_freed_memory()
        if path is not None and not self.stale:
            meta = self._meta("grades") | {"grader": grader_pk, "revision": self.revision}
            snapshot_files.write(path, meta, store.arrays())
        return store

    def _read_store(self, session: Session, path: Path, grader: GraderRef) -> GradeStore | None:
        found = snapshot_files.read(path, self._meta("grades") | {"grader": grader.id}, GRADE_ARRAYS)
        if found is None:
            return None
        meta, arrays = found
        file_revision = meta.get("revision")
        if type(file_revision) is not int or file_revision > self.revision:  # another history: drop it
            snapshot_files.discard(path)
            return None
        try:
            store = GradeStore.from_arrays(grader, arrays, self.structure.index.n_entries)
        except ValueError:
            snapshot_files.discard(path)
            return None
        newer = _grade_rows(self.collection_id).where(Grade.grader_pk == grader.id, Grade.revision > file_revision)
        self._apply_rows(store, fetch_chunks(session, newer))
        return store

    def _meta(self, kind: str) -> dict[str, Any]:
        return {
            "format": snapshot_files.FORMAT,
            "kind": kind,
            "identity": None if self.database is None else self.database.identity,
            "collection": self.collection_id,
            "token": self.structure.token,
        }

    def apply_changes(self, session: Session, revision: int) -> None:
        """Read the grade rows written after the revision seen so far and apply them."""
        for chunk in fetch_chunks(session, _grade_rows(self.collection_id).where(Grade.revision > self.revision)):
            new = {row[0] for row in chunk} - set(self.graders)
            if new:
                self.graders.update(
                    (g.id, GraderRef.of(g)) for g in session.scalars(select(Grader).where(Grader.id.in_(new)))
                )
            for grader_pk, store in self.stores.items():
                self._apply_rows(store, iter([[row for row in chunk if row[0] == grader_pk]]))
        self.revision = revision

    def _apply_rows(self, store: GradeStore, chunks: Iterator[list[tuple[Any, ...]]]) -> None:
        """Apply (grader, entry pk, item, rating, correct) rows; rows of entries this structure lacks mark it stale."""
        blocks = []
        for chunk in chunks:
            if not chunk:
                continue
            n = len(chunk)
            entry = self.structure.positions_of(np.fromiter(map(itemgetter(1), chunk), np.int64, n))
            known = entry >= 0
            if not known.all():  # written after a structural change this snapshot predates: rebuild next time
                self.stale = True
                chunk = [row for row, ok in zip(chunk, known.tolist(), strict=True) if ok]
                entry, n = entry[known], len(chunk)
            blocks.append(
                (
                    entry.astype(np.int32),
                    store.item_codes(list(map(itemgetter(2), chunk))),
                    np.fromiter((NO_RATING if r is None else r for r in map(itemgetter(3), chunk)), np.int64, n),
                    np.fromiter((bool(c) for c in map(itemgetter(4), chunk)), bool, n),
                )
            )
        if blocks:
            entry, code, rating, correct = (np.concatenate(column) for column in zip(*blocks, strict=True))
            store.apply_arrays(entry, code, rating, correct)


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
    return [row for chunk in fetch_chunks(session, statement) for row in chunk]


def database_key(session: Session) -> str:
    """Which database ``session`` reads, as the first part of every per-process cache key that holds a
    collection id, revision or structure token (ids repeat across databases; passwords stay out)."""
    return session.get_bind().engine.url.render_as_string(hide_password=True)


# Not an app.kept.Kept: the snapshots and the answered-cells stores share one byte budget, and a
# snapshot evicted takes its stores with it; each Kept bounds only itself, and sizes what it holds once,
# at put, where a snapshot grows in place (grades loaded per grader, rows applied per revision).
_snapshots: OrderedDict[tuple[str, int], CollectionSnapshot] = OrderedDict()
_snapshots_lock = threading.RLock()


def current(session: Session, collection: Collection) -> CollectionSnapshot:
    """The collection's snapshot, brought up to date with what ``session`` can see."""
    revision, token = session.execute(
        select(Collection.revision, Collection.structure_token).where(Collection.id == collection.id)
    ).one()
    key = (database_key(session), collection.id)
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
    database = snapshot_files.database_identity(session) if snapshot_files.cache_dir() is not None else None
    structure, graders = _cold_structure(session, collection, token, revision, database)
    snapshot = CollectionSnapshot(collection.id, structure, revision, graders, database)
    with _snapshots_lock:
        _snapshots[key] = snapshot
        _snapshots.move_to_end(key)
    _evict()
    _settle_heap()
    return snapshot


def _cold_structure(
    session: Session, collection: Collection, token: str, revision: int, database: snapshot_files.Database | None
) -> tuple[Structure, list[GraderRef]]:
    """The structure and the graders with grades, from the persisted file when one matches, else from the database.

    The file also lists the graders that had grades at its revision R_s; with the graders of rows
    written after R_s that is every grader with grades (grades leave only by deletion, which
    replaces the token). It spares a DISTINCT over every grade row of the collection.
    """
    path = None if database is None else snapshot_files.structure_path(database, collection.id, token)
    meta: dict[str, Any] = {
        "format": snapshot_files.FORMAT,
        "kind": "structure",
        "identity": None if database is None else database.identity,
        "collection": collection.id,
        "token": token,
    }
    found = None if path is None else snapshot_files.read(path, meta, STRUCTURE_ARRAYS)
    if path is not None and found is not None:
        file_meta, arrays = found
        file_revision, file_graders = file_meta.get("revision"), file_meta.get("graders")
        try:
            if type(file_revision) is not int or file_revision > revision:
                raise ValueError("another history of this database")
            if not isinstance(file_graders, list) or not all(type(pk) is int for pk in file_graders):
                raise ValueError("no grader list")
            structure = Structure.from_arrays(token, collection.id, arrays)
        except ValueError:
            snapshot_files.discard(path)
        else:
            newer = select(Grade.grader_pk).where(Grade.collection_id == collection.id, Grade.revision > file_revision)
            pks = set(file_graders) | set(session.scalars(newer.distinct()))
            rows = session.scalars(select(Grader).where(Grader.id.in_(pks)).order_by(Grader.id))
            return structure, [GraderRef.of(g) for g in rows]
    graders = [GraderRef.of(g) for g in queries.graders_of(session, collection)]
    structure = load_structure(session, collection, token)
    if path is not None:
        listed = meta | {"revision": revision, "graders": [g.id for g in graders]}
        snapshot_files.write(path, listed, structure.arrays())
    return structure, graders


def memory_bytes() -> int:
    """What the kept snapshots and answered-cells stores hold (``nbytes`` estimates)."""
    with _snapshots_lock:
        return sum(s.nbytes() for s in _snapshots.values()) + sum(a.nbytes() for a in _answer_stores.values())


def _evict() -> None:
    """Drop least recently used snapshots (with their answered-cells stores) past ``snapshot_memory_mb``.

    The most recently used snapshot always stays, however large: the request that asked for it
    is using it.
    """
    budget = get_settings().snapshot_memory_mb * 2**20
    with _snapshots_lock:
        while len(_snapshots) > 1 and memory_bytes() > budget:
            key, _ = _snapshots.popitem(last=False)
            for answer_key in [k for k in _answer_stores if k[:2] == key]:
                del _answer_stores[answer_key]


def _settle_heap() -> None:
    """Move the long-lived snapshot objects out of the cyclic collector's way.

    A snapshot's strings (passage, query and item ids) are long-lived; a full collection walking
    them on every request was once the p95 of the grid and leaderboard pages. ``unfreeze`` first,
    so that a replaced snapshot can still be freed; one full collection per rebuild, which is rare.

    A one-shot process (a CLI command, app/collector.py) ends right after its answer: no later request
    gains from the full collection (0.1 s at 10×) or the trim, so it only freezes. ``freeze`` alone
    walks no object (it moves the generations' lists whole), and it is still needed: the CLI pauses
    the collector for its start-up, so everything built so far sits in the young generation, and
    without it the first young and middle collections would walk it all (skipping the freeze too made the
    cold CLI leaderboard at 10× 0.2-0.3 s slower than settling; the freeze alone, 0.1-0.2 s faster).
    """
    if collector.is_one_shot():
        gc.freeze()
        return
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    release_freed_memory()


def release_freed_memory() -> None:
    """Hand the heap a cold build freed (its driver rows) back to the system: glibc keeps it otherwise.

    Measured at 10×: a database build left 404 MB resident for a 106 MB snapshot; after the trim, 134 MB.
    """
    if _libc is not None:
        _libc.malloc_trim(0)


def _load_libc() -> Any:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim  # noqa: B018 - glibc only: probe it here, not on every build
    except (OSError, AttributeError):
        return None
    return libc


_libc = _load_libc()


def select_grader(
    session: Session, collection: Collection, *, model: str | None, prompt_class: str | None
) -> GraderRef:
    """The one grader with grades in the collection that matches the filters, from its snapshot's list."""
    return queries.match_grader(current(session, collection).grader_list(), model=model, prompt_class=prompt_class)


def clear() -> None:
    """Forget every snapshot (the next leaderboard reads its collection from its file or the database again)."""
    with _snapshots_lock:
        _snapshots.clear()
        _answer_stores.clear()


def clear_files() -> int:
    """Forget every snapshot and delete every persisted one (after restoring a database backup in place)."""
    clear()
    return snapshot_files.clear_files()


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
    """Whether each of one grader's cells has an answer; kept current like a ``GradeStore`` (same columns).

    The verify view lists answered cells only; reading every answer text of a collection per
    request costs seconds at DL size, so the flags are kept and the texts read per page.
    """

    def __init__(self, token: str, revision: int) -> None:
        self.token, self.revision = token, revision
        self.items: list[str] = []
        self._item_code: dict[str, int] = {}
        self.keys: Int64s = np.zeros(0, np.int64)  # entry << 32 | item code, sorted
        self.answered: npt.NDArray[np.bool_] = np.zeros(0, bool)
        self._cells: AnsweredCells | None = None  # built on first use after a change
        self.lock = threading.Lock()

    def apply(self, structure: Structure, rows: Sequence[tuple[Any, ...]]) -> None:
        """Upsert (entry pk, item id, answered) rows; entries unknown to the snapshot are skipped."""
        entry = structure.positions_of([row[0] for row in rows])
        known = [row for row, e in zip(rows, entry.tolist(), strict=True) if e >= 0]
        item_code = self._item_code
        codes = np.fromiter((item_code.setdefault(r[1], len(item_code)) for r in known), np.int64, len(known))
        self.items.extend(list(item_code)[len(self.items) :])
        flags = np.fromiter((bool(r[2]) for r in known), bool, len(known))
        key = entry[entry >= 0] << ITEM_BITS | codes
        self.keys, (self.answered,) = upsert(self.keys, (self.answered,), key, (flags,))
        self._cells = None

    def cells(self) -> AnsweredCells:
        if self._cells is None:
            keys = self.keys[self.answered]
            self._cells = AnsweredCells(tuple(self.items), keys >> ITEM_BITS, keys & ITEM_MASK)
        return self._cells

    def nbytes(self) -> int:
        cells = self._cells
        derived = 0 if cells is None else cells.entry.nbytes + cells.item.nbytes
        strings = sum(STR_BYTES + len(i) for i in self.items) + DICT_ENTRY_BYTES * len(self.items)
        return self.keys.nbytes + self.answered.nbytes + derived + strings


_answer_stores: OrderedDict[tuple[str, int, int], AnswerStore] = OrderedDict()


def answered_cells(session: Session, collection: Collection, grader_pk: int) -> AnsweredCells:
    """The grader's answered cells in the collection's current snapshot, read once, then by revision."""
    from sqlalchemy import case, func

    current_snapshot = current(session, collection)
    structure, revision = current_snapshot.structure, current_snapshot.revision
    key = (database_key(session), collection.id, grader_pk)
    answer = func.coalesce(Grade.extracted_answer, Grade.raw_answer)
    statement = select(Grade.pool_entry_pk, Grade.item_id, case((func.length(answer) > 0, 1), else_=0)).where(
        Grade.collection_id == collection.id, Grade.grader_pk == grader_pk
    )
    with _snapshots_lock:
        store = _answer_stores.get(key)
        if store is None or store.token != structure.token:
            store = _answer_stores[key] = AnswerStore(structure.token, -1)
        _answer_stores.move_to_end(key)
    with store.lock:
        if store.revision != revision:
            newer = statement if store.revision < 0 else statement.where(Grade.revision > store.revision)
            store.apply(structure, core_rows(session, newer))
            store.revision = revision
        cells = store.cells()
    _evict()
    return cells


class ManualJudgments:
    """A collection's manual judgments as columns over its snapshot's pool, named by the token they were read under.

    Row j is judgment ``relevance[j]`` of pool entry ``entry[j]`` (a position), rows in (entry pk,
    ordinal) order: an entry's judgments keep their stored order. Judgments of entries the structure
    lacks (written after a structural change this snapshot predates, which rebuilds it next time) are
    left out. The per-query dict and the per-entry extremes are built on first use.
    """

    def __init__(self, token: str, structure: Structure, entry: Int64s, relevance: Int64s) -> None:
        self.token = token
        self.structure = structure
        self.entry = entry
        self.relevance = relevance
        self._by_query: Judgments | None = None
        self._extremes: tuple[Any, Any, Any] | None = None
        self._lock = threading.Lock()

    @property
    def by_query(self) -> Judgments:
        """query → passage → judgments (in stored order), as ``queries.load_judgments`` reads them."""
        with self._lock:
            if self._by_query is None:
                index = self.structure.index
                result: dict[str, dict[str, list[int]]] = {}
                queries_of = index.entry_query.tolist()
                for e, relevance in zip(self.entry.tolist(), self.relevance.tolist(), strict=True):
                    by_passage = result.setdefault(index.query_ids[queries_of[e]], {})
                    by_passage.setdefault(index.passage_ids[e], []).append(relevance)
                self._by_query = result
            return self._by_query

    def extremes(self) -> tuple[Any, Any, Any]:
        """Per pool entry: whether it is judged, its lowest judgment (0 if not) and its highest (-1 if not)."""
        with self._lock:
            if self._extremes is None:
                n = self.structure.index.n_entries
                judged = np.zeros(n, dtype=bool)
                worst = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
                best = np.full(n, -1, dtype=np.int64)
                if len(self.entry):
                    judged[self.entry] = True
                    np.minimum.at(worst, self.entry, self.relevance)
                    np.maximum.at(best, self.entry, self.relevance)
                worst[~judged] = 0
                for array in (judged, worst, best):
                    array.flags.writeable = False  # shared by every caller of this token
                self._extremes = judged, worst, best
            return self._extremes

    def nbytes(self) -> int:
        n_entries = self.structure.index.n_entries
        built = (self._by_query is not None) * DICT_ENTRY_BYTES * 2 * len(self.entry)  # dict slot and list per judgment
        extremes = (self._extremes is not None) * 17 * n_entries
        return self.entry.nbytes + self.relevance.nbytes + built + extremes


def manual_judgments(session: Session, collection: Collection) -> ManualJudgments:
    """The collection's manual judgments over its current snapshot, read again only after a judgment write.

    The token is read before the rows: rows newer than the token seen are kept under the older
    token, which the next reader finds replaced and reads again; never the other way round.
    """
    from app.models import Judgment  # noqa: PLC0415 - the snapshot's other readers never need it

    judgments_token = session.execute(
        select(Collection.judgments_token).where(Collection.id == collection.id)
    ).scalar_one()
    current_snapshot = current(session, collection)
    structure = current_snapshot.structure
    token = f"{structure.token}:{judgments_token}"  # a structural write deletes judgments with their entries
    kept = current_snapshot.manual
    if kept is not None and kept.token == token:
        return kept
    rows = core_rows(
        session,
        select(Judgment.pool_entry_pk, Judgment.relevance)
        .join(PoolEntry, PoolEntry.id == Judgment.pool_entry_pk)
        .join(Query, Query.id == PoolEntry.query_pk)
        .where(Query.collection_id == collection.id)
        .order_by(Judgment.pool_entry_pk, Judgment.ordinal),
    )
    entry = structure.positions_of([pk for pk, _ in rows])
    relevance = np.fromiter((relevance for _, relevance in rows), np.int64, len(rows))
    known = entry >= 0
    manual = ManualJudgments(token, structure, entry[known], relevance[known])
    with current_snapshot.lock:
        current_snapshot.manual = manual
    _evict()
    return manual


def judgment_extremes(session: Session, collection: Collection) -> tuple[Any, Any, Any]:
    """Per entry of the current snapshot's pool: whether it is judged, its lowest and its highest judgment.

    Unjudged entries read 0 (lowest) and -1 (highest). Kept with the judgments (``manual_judgments``),
    read-only arrays.
    """
    return manual_judgments(session, collection).extremes()


def worst_judgments(session: Session, collection: Collection) -> tuple[Any, Any]:
    """Per entry of the current snapshot's pool: whether it is judged, and its lowest judgment (0 if not)."""
    judged, worst, _ = judgment_extremes(session, collection)
    return judged, worst
