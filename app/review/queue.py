"""The review queue: which cell a judge should look at next.

Two orders over the same cells (one grader's grades on the items of the newest rubric version):

* ``priority``: the cells whose review can move the leaderboard most, among those the grader is
  least sure of first (``priority_scores``, formula in its docstring);
* ``uniform``: a seeded uniform random permutation of the pool's *rows* (passages), each row's
  cells together (``uniform_order``). A prediction-powered (PPI) estimate needs human labels on a
  *uniform* sample of rows (app/review/ppi_sample.py): cells picked by priority are, by design, not
  representative, and P@k and Cover need every item of a passage labelled, not single cells.

Scores are computed from the evaluation snapshot's arrays (app/collections/snapshot.py) and kept
per (collection, structure, revision, grader, rubric version, settings): a judge's override moves
no revision, so a judge's "next cell" costs a look-up in the kept order, not a recomputation.
Cells already overridden, and cells of questions flagged as spurious, leave the queue at once (both
read per request; they are few).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.collections import snapshot
from app.collections.graders import resolve_grader
from app.collections.queries import GraderRef, version_item_ids
from app.collections.snapshot import core_rows, judgment_extremes
from app.errors import Invalid, NotFound
from app.evaluation.cover import OVERALL, cover_scores_of, cover_table
from app.evaluation.frame import NO_RATING, BoolArray, FloatArray, GradeFrame, IntArray, PoolIndex, RankingFrame
from app.kept import Kept
from app.leaderboards import params
from app.models import Collection, Grade, GradeOverride, OverrideEvent, PoolEntry, Query, RubricVersion
from app.review.flags import flagged_ids
from app.rubrics.service import latest_version

Mode = Literal["priority", "uniform"]
Exclude = Literal["any", "mine"]
MODES: tuple[Mode, ...] = ("priority", "uniform")
REACH_WEIGHT = 0.1  # ε: how much moving any system counts next to moving a close pair
DISAGREE_WEIGHT = 0.5  # how strongly a contradicting manual judgment alone makes a cell uncertain
NEAR_SPREAD = 2.5  # grades this far from the threshold are "sure" (half the 0..5 scale)
RELEVANT_JUDGMENT = 2  # TREC DL: judgments 2 and 3 are relevant
LIMIT = (1, 1000)
SEED = (0, 2**32 - 1)
OFFSET = (0, 1_000_000)
MAX_SKIPPED_ROWS = 5  # whole rows a judge may skip in uniform mode before a sample action stops counting
MAX_KEPT = 8  # scored queues (and pools' row ids) kept per process: one per grader and settings in use
UIntArray = npt.NDArray[np.uint64]


# ---- the pure part: scores from arrays ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CellScores:
    """Per cell of a GradeFrame (same order): why it is where it is in the priority order."""

    effect: FloatArray  # L: Cover points the cell can move on close pairs of systems
    uncertainty: FloatArray  # U in [0, 1]
    near: FloatArray  # grade near the threshold, in [0, 1]
    low_mass: FloatArray  # 1 − valid-token mass (0 where not stored)
    disagree: BoolArray  # the manual judgment contradicts the grade
    reach: IntArray  # systems whose Cover this cell can move
    priority: FloatArray  # L × U


def pair_weights(scores: list[tuple[float, float]]) -> list[tuple[int, int, float]]:
    """Adjacent systems of the leaderboard that are statistically close, with how close.

    ``scores[s]`` = (Cover, stderr) of system s. Sorted by Cover (descending; ties by index), each
    adjacent pair (a, b) gets
        w_ab = max(0, 1 − δ_ab / σ_ab),  δ_ab = |C_a − C_b|,  σ_ab = √(se_a² + se_b²)
    (σ_ab = 0: w = 1 if δ = 0 else 0). Pairs further apart than one stderr of their difference
    get w = 0 and are left out: a single cell cannot reorder them.
    """
    order = sorted(range(len(scores)), key=lambda s: (-scores[s][0], s))
    pairs = []
    for a, b in zip(order, order[1:], strict=False):
        delta = abs(scores[a][0] - scores[b][0])
        sigma = float(np.hypot(scores[a][1], scores[b][1]))
        weight = (1.0 if delta == 0 else 0.0) if sigma == 0 else max(0.0, 1.0 - delta / sigma)
        if weight > 0:
            pairs.append((a, b, weight))
    return pairs


def pivotal(grades: GradeFrame, rankings: RankingFrame, *, min_rating: int | None, top_k: int) -> BoolArray:
    """P[s, c]: flipping cell c (covered ↔ not) changes system s's Cover on c's query.

    With Top_k(s, q) the passages s ranks at rank ≤ k and K_{s,q,i} = |{p ∈ Top_k(s,q) : i ∈ cov(p)}|,
    cell c = (p, i) of query q is pivotal for s iff p ∈ Top_k(s, q) and K_{s,q,i} = [c covered]:
    a covered cell is the only passage covering i in s's top k, or i is not covered there at all.
    """
    pool, n_queries = grades.pool, len(grades.pool.query_ids)
    n_items = max(len(grades.items), 1)
    covered = grades.covered(min_rating)
    query_of_cell = pool.entry_query[grades.entry]
    result = np.zeros((len(rankings.systems), len(grades.entry)), dtype=bool)
    top = rankings.rank <= top_k
    for s in range(len(rankings.systems)):
        in_top = np.zeros(pool.n_entries, dtype=bool)
        in_top[rankings.entry[top & (rankings.system == s)]] = True
        counts = np.zeros((n_queries, n_items), dtype=np.int64)
        hit = covered & in_top[grades.entry]
        np.add.at(counts, (query_of_cell[hit], grades.item[hit]), 1)
        result[s] = in_top[grades.entry] & (counts[query_of_cell, grades.item] == covered.astype(np.int64))
    return result


def uncertainty(
    grades: GradeFrame,
    *,
    min_rating: int | None,
    expected: FloatArray,
    valid_mass: FloatArray,
    judged: IntArray,
) -> tuple[FloatArray, FloatArray, FloatArray, BoolArray]:
    """(U, near, low_mass, disagree) per cell.

    g = E[grade] where stored, else the self-rating; t = the Cover threshold (``min_rating``):
        near     = clip(1 − |g − (t − ½)| / 2.5, 0, 1)   (1 for a cell with no parsable grade;
                   ½ for boolean grades or no threshold: there is no scale to be near)
        low_mass = 1 − valid-token mass where stored, else 0
        disagree = the passage is judged non-relevant (< 2) but the cell is covered, or judged
                   relevant (≥ 2) but the grader covers none of its query's items with it
        U = 1 − (1 − near)(1 − low_mass)(1 − ½·disagree)      (a noisy-or of the three signals)
    ``judged[e]`` is the passage's highest judgment, −1 where unjudged. Per item, "relevant but
    not covered" is the norm (a relevant passage answers a few of the questions), so relevance
    contradicts a grade only when the passage covers nothing at all.
    """
    covered = grades.covered(min_rating)
    if grades.is_self_rated and min_rating is not None:
        grade = np.where(np.isnan(expected), grades.rating.astype(np.float64), expected)
        unknown = np.isnan(expected) & (grades.rating == NO_RATING)
        near = np.clip(1.0 - np.abs(grade - (min_rating - 0.5)) / NEAR_SPREAD, 0.0, 1.0)
        near = np.where(unknown, 1.0, near)
    else:
        near = np.full(len(grades.entry), 0.5)
    low_mass = np.where(np.isnan(valid_mass), 0.0, np.clip(1.0 - valid_mass, 0.0, 1.0))
    covers_any = np.zeros(grades.pool.n_entries, dtype=bool)
    covers_any[grades.entry[covered]] = True
    judgment = judged[grades.entry]
    disagree = ((judgment >= 0) & (judgment < RELEVANT_JUDGMENT) & covered) | (
        (judgment >= RELEVANT_JUDGMENT) & ~covers_any[grades.entry]
    )
    total = 1.0 - (1.0 - near) * (1.0 - low_mass) * (1.0 - DISAGREE_WEIGHT * disagree)
    return total, near, low_mass, disagree


def priority_scores(
    grades: GradeFrame,
    rankings: RankingFrame,
    *,
    min_rating: int | None,
    top_k: int,
    expected: FloatArray,
    valid_mass: FloatArray,
    judged: IntArray,
) -> CellScores:
    """priority_c = L_c × U_c for every cell c = (p, i) of query q.

    Leaderboard effect, in Cover points moved (N graded queries, |Q_q| items seen in q, S systems,
    P the ``pivotal`` matrix, A the close adjacent pairs of ``pair_weights`` on the Cover board):
        L_c = 1 / (N·|Q_q|) · ( Σ_{(a,b) ∈ A} w_ab·[P_a(c) ≠ P_b(c)] + ε·Σ_s P_s(c) / S ),  ε = 0.1
    A flip moves cover_q of each pivotal system by 1/|Q_q|, hence its Cover by about 1/(N·|Q_q|);
    it changes the gap of a pair only when exactly one of the two is pivotal. The ε term orders
    cells that move no close pair by how many systems they move; a cell no system ranks in its
    top k cannot change Cover, and gets L = 0. U_c is ``uncertainty``.
    """
    n_cells = len(grades.entry)
    if n_cells == 0:
        empty = np.zeros(0)
        return CellScores(empty, empty, empty, empty, np.zeros(0, bool), np.zeros(0, np.int64), empty)
    table = cover_table(grades, rankings, min_rating=min_rating, top_k=top_k)
    board = {s.system: (s.score, s.stderr) for s in cover_scores_of(table) if s.system != OVERALL}
    pairs = pair_weights([board.get(name, (0.0, 0.0)) for name in rankings.systems])
    moves = pivotal(grades, rankings, min_rating=min_rating, top_k=top_k)
    close = np.zeros(n_cells)
    for a, b, weight in pairs:
        close += weight * (moves[a] != moves[b])
    reach = moves.sum(axis=0)
    query = grades.pool.entry_query[grades.entry]
    n_queries = len(grades.pool.query_ids)
    stride = max(len(grades.items), 1)
    seen = np.bincount(np.unique(query * stride + grades.item) // stride, minlength=n_queries)
    graded_queries = max(int(np.count_nonzero(seen)), 1)
    per_flip = 1.0 / (graded_queries * np.maximum(seen[query], 1))
    effect = per_flip * (close + REACH_WEIGHT * reach / max(len(rankings.systems), 1))
    u, near, low_mass, disagree = uncertainty(
        grades, min_rating=min_rating, expected=expected, valid_mass=valid_mass, judged=judged
    )
    return CellScores(effect, u, near, low_mass, disagree, reach.astype(np.int64), effect * u)


def priority_order(grades: GradeFrame, scores: CellScores) -> IntArray:
    """Cells by priority descending; ties by L, then U descending, then pool order and item id."""
    item_rank = np.argsort(np.argsort(np.asarray(grades.items, dtype=object)))
    keys = (item_rank[grades.item], grades.entry, -scores.uncertainty, -scores.effect, -scores.priority)
    order: IntArray = np.lexsort(keys)
    return order


def row_ids(pool: PoolIndex) -> UIntArray:
    """Per entry position, a 64-bit id of its row: blake2b of (query id, passage id), the same in any pool."""
    keys = [
        hashlib.blake2b(f"{pool.query_ids[q]}\x00{p}".encode(), digest_size=8).digest()
        for q, p in zip(pool.entry_query.tolist(), pool.passage_ids, strict=True)
    ]
    ids: UIntArray = np.frombuffer(b"".join(keys), dtype=">u8").astype(np.uint64)
    return ids


def _mix(x: UIntArray) -> UIntArray:
    """splitmix64's finaliser: a bijection of 64-bit integers that scatters every input bit over the output."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def row_places(ids: UIntArray, seed: int) -> IntArray:
    """Per row (entry position), its 0-based place in the seed's uniform order of rows.

    key_e = mix(id_e ⊕ mix(seed + γ)) (γ = 2⁶⁴/φ, ``mix`` a bijection), rows sorted by key: a keyed
    pseudo-random order of the rows themselves, not of their positions, so a regrade, a rubric edit
    or rows added to the pool leave the order of the other rows unchanged (new rows fall in between).
    """
    with np.errstate(over="ignore"):
        salt = _mix(np.array([(seed + 0x9E3779B97F4A7C15) % 2**64], dtype=np.uint64))
        keys = _mix(ids ^ salt[0])
    order = np.argsort(keys, kind="stable")
    places = np.empty(len(ids), dtype=np.int64)
    places[order] = np.arange(len(ids))
    return places


def uniform_order(grades: GradeFrame, seed: int, places: IntArray | None = None) -> IntArray:
    """The cells by their row's place in the seed's uniform row order (``row_places``), then item id.

    A judge completes one passage row at a time: PPI labels rows (app/review/ppi_sample.py). The
    order depends on the rows' identities and the items' ids only, never on the order the snapshot
    loaded the cells in. ``places`` are ``row_places`` of the pool when the caller keeps them.
    """
    if places is None:
        places = row_places(row_ids(grades.pool), seed)
    item_rank = np.argsort(np.argsort(np.asarray(grades.items, dtype=object)))
    order: IntArray = np.lexsort((item_rank[grades.item], places[grades.entry]))
    return order


def judge_seed(collection: str, judge: str) -> int:
    """Each judge's own stable seed: reloads (and other processes) give the judge the same sequence."""
    return int.from_bytes(hashlib.sha256(f"{collection}\x00{judge}".encode()).digest()[:4], "big")


# ---- the service: the queue of a collection -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueRequest:
    """A judge's queue, bounded at construction (``check``)."""

    judge: str
    mode: Mode = "priority"
    grader_id: int | None = None
    query_id: str | None = None
    seed: int | None = None  # uniform mode; None: the judge's own stable seed
    exclude: Exclude = "any"  # "any": cells anyone overrode; "mine": cells this judge rated
    min_rating: int = 4
    top_k: int = 20

    def check(self) -> QueueRequest:
        if self.mode not in MODES:
            raise Invalid(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.exclude not in ("any", "mine"):
            raise Invalid(f"exclude must be any or mine, got {self.exclude!r}")
        if self.seed is not None:
            params.bounded("seed", self.seed, SEED)
        params.bounded("min_rating", self.min_rating, (0, 5))
        params.bounded("top_k", self.top_k, params.TOP_K)
        return self


@dataclass(frozen=True, slots=True)
class QueueCell:
    """One cell to review, with the score's components (priority mode) or its sample position."""

    pool_entry: int
    query_id: str
    passage_id: str
    item_id: str
    rating: int | None
    expected: float | None
    valid_mass: float | None
    effect: float
    uncertainty: float
    near: float
    low_mass: float
    disagree: bool
    reach: int
    priority: float
    position: int  # 1-based place in the judge's order (among every cell, reviewed ones included)
    # uniform mode (0 in priority mode): the 1-based place of the cell's passage row among the graded
    # rows of the judge's order, and the cell's place among that row's ``row_items`` cells
    row: int = 0
    row_item: int = 0
    row_items: int = 0

    def as_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True)
class Queue:
    grader: GraderRef
    mode: Mode
    seed: int | None
    rubric_version: int | None
    cells: tuple[QueueCell, ...]
    remaining: int  # cells still to review (with the query filter)
    total: int  # cells in the queue before any review (with the query filter)
    per_query: dict[str, int]  # query id → cells in the queue (no filter)

    def as_json(self) -> dict[str, Any]:
        return {
            "grader": self.grader.id,
            "mode": self.mode,
            "seed": self.seed,
            "rubric_version": self.rubric_version,
            "remaining": self.remaining,
            "total": self.total,
            "cells": [c.as_json() for c in self.cells],
        }


@dataclass(frozen=True)
class _Scored:
    """The kept part: one grader's cells, their scores and the priority order."""

    grades: GradeFrame
    entry_pks: IntArray  # per entry position: the pool entry pk
    expected: FloatArray
    valid_mass: FloatArray
    scores: CellScores
    order: IntArray
    entry_of: dict[int, int]  # pool entry pk → entry position
    item_code: dict[str, int]  # item id → its code in ``grades.items``
    sorted_keys: IntArray  # cell keys (entry · |items| + item code), ascending
    sorted_cells: IntArray  # the cell of each of ``sorted_keys``
    row_ids: UIntArray  # per entry position: ``row_ids`` (the uniform order's key)
    # per seed (judge), the uniform order: sorting every cell costs most of a second at 5× DL
    uniform: Kept[int, _Uniform] = field(default_factory=lambda: _seed_orders(), compare=False)

    def cell(self, pool_entry: int, item_id: str) -> int | None:
        """The cell of (pool entry pk, item id), None when it is not in the queue."""
        e, code = self.entry_of.get(pool_entry), self.item_code.get(item_id)
        if e is None or code is None:
            return None
        key = e * max(len(self.grades.items), 1) + code
        at = int(np.searchsorted(self.sorted_keys, key))
        found = at < len(self.sorted_keys) and int(self.sorted_keys[at]) == key
        return int(self.sorted_cells[at]) if found else None


_kept: Kept[tuple[Any, ...], _Scored] = Kept(MAX_KEPT)
_row_ids: Kept[tuple[Any, ...], UIntArray] = Kept(MAX_KEPT)


def structure_row_ids(session: Session, structure: snapshot.Structure) -> UIntArray:
    """``row_ids`` of a snapshot structure's pool, kept per structure (hashing a DL pool costs ~0.1 s)."""
    url = snapshot.database_key(session)
    key = (url, structure.pool.collection_id, structure.token)
    return _row_ids.get_or_compute(key, lambda: row_ids(structure.index))


def _stored_probabilities(
    session: Session, grades: GradeFrame, grader_pk: int, position: dict[int, int]
) -> tuple[FloatArray, FloatArray]:
    """(E[grade], valid mass) per cell, NaN where not stored (only score-mode grades store them)."""
    expected, mass = np.full(len(grades.entry), np.nan), np.full(len(grades.entry), np.nan)
    rows = core_rows(
        session,
        select(Grade.pool_entry_pk, Grade.item_id, Grade.expected_grade, Grade.valid_mass).where(
            Grade.grader_pk == grader_pk,
            (Grade.expected_grade.is_not(None)) | (Grade.valid_mass.is_not(None)),
        ),
    )
    if not rows:
        return expected, mass
    stride = max(len(grades.items), 1)
    code = {item: i for i, item in enumerate(grades.items)}
    cell_key = grades.entry * stride + grades.item
    sorter = np.argsort(cell_key)
    for entry_pk, item_id, e, m in rows:
        if entry_pk not in position or item_id not in code:
            continue
        key = position[entry_pk] * stride + code[item_id]
        at = int(np.searchsorted(cell_key, key, sorter=sorter))
        if at < len(sorter) and cell_key[sorter[at]] == key:
            expected[sorter[at]] = np.nan if e is None else float(e)
            mass[sorter[at]] = np.nan if m is None else float(m)
    return expected, mass


def _scored(
    session: Session, collection: Collection, grader: GraderRef, request: QueueRequest
) -> tuple[_Scored, int | None]:
    current = snapshot.current(session, collection)
    version = latest_version(session, collection)
    number = version.number if version is not None else None
    key = (
        snapshot.database_key(session),
        collection.id,
        current.structure.token,
        current.revision,
        grader.id,
        number,
        request.min_rating,
        request.top_k,
    )
    return _kept.get_or_compute(key, lambda: _score(session, collection, current, grader, version, request)), number


def _score(
    session: Session,
    collection: Collection,
    current: snapshot.CollectionSnapshot,
    grader: GraderRef,
    version: RubricVersion | None,
    request: QueueRequest,
) -> _Scored:
    """One grader's queue as ``_scored`` keeps it: its cells, their scores and the priority order."""
    grades = current.grades(session, grader.id)
    if version is not None:
        grades = grades.restrict_items(version_item_ids(session, version))
    # a direct grade (item "") is no cell a judge can override
    grades = grades.select(np.array([bool(item) for item in grades.items], dtype=bool)[grades.item])
    position = current.structure.position
    expected, mass = _stored_probabilities(session, grades, grader.id, position)
    judged = judgment_extremes(session, collection)[2]  # the highest judgment per entry, -1 if unjudged
    scores = priority_scores(
        grades,
        current.structure.rankings,
        min_rating=request.min_rating if grader.is_self_rated else None,
        top_k=request.top_k,
        expected=expected,
        valid_mass=mass,
        judged=judged,
    )
    entry_pks = np.zeros(grades.pool.n_entries, dtype=np.int64)
    entry_pks[list(position.values())] = list(position.keys())
    keys = grades.entry * max(len(grades.items), 1) + grades.item
    by_key = np.argsort(keys)
    item_code = {item: i for i, item in enumerate(grades.items)}
    order = priority_order(grades, scores)
    ids = structure_row_ids(session, current.structure)
    return _Scored(
        grades, entry_pks, expected, mass, scores, order, dict(position), item_code, keys[by_key], by_key, ids
    )


def reviewed_cells(session: Session, collection: Collection, request: QueueRequest) -> set[tuple[int, str]]:
    """(pool entry pk, item id) of the cells out of the queue: overridden by anyone, or rated by this judge.

    ``exclude="any"`` (the default) leaves out every overridden cell, so that judges working at
    once never review the same cell twice. ``exclude="mine"`` leaves out only the cells this judge
    has rated (a non-undone action), so that a second judge can review cells a first judge did:
    what judge-judge agreement needs.
    """
    if request.exclude == "mine":
        rows = session.execute(
            select(OverrideEvent.pool_entry_pk, OverrideEvent.item_id).where(
                OverrideEvent.collection_id == collection.id,
                OverrideEvent.judge == request.judge,
                OverrideEvent.undone.is_(False),
                OverrideEvent.action != "clear",
            )
        ).all()
        return {(pk, item) for pk, item in rows}
    rows = session.execute(
        select(GradeOverride.pool_entry_pk, GradeOverride.item_id)
        .join(PoolEntry, PoolEntry.id == GradeOverride.pool_entry_pk)
        .join(Query, Query.id == PoolEntry.query_pk)
        .where(Query.collection_id == collection.id)
    ).all()
    return {(pk, item) for pk, item in rows}


def _cell(kept: _Scored, c: int, place: int, row: tuple[int, int, int] = (0, 0, 0)) -> QueueCell:
    grades, scores = kept.grades, kept.scores
    e = int(grades.entry[c])
    rating = int(grades.rating[c])
    expected, mass = float(kept.expected[c]), float(kept.valid_mass[c])
    return QueueCell(
        pool_entry=int(kept.entry_pks[e]),
        query_id=grades.pool.query_ids[int(grades.pool.entry_query[e])],
        passage_id=grades.pool.passage_ids[e],
        item_id=grades.items[int(grades.item[c])],
        rating=None if rating == NO_RATING else rating,
        expected=None if np.isnan(expected) else expected,
        valid_mass=None if np.isnan(mass) else mass,
        effect=float(scores.effect[c]),
        uncertainty=float(scores.uncertainty[c]),
        near=float(scores.near[c]),
        low_mass=float(scores.low_mass[c]),
        disagree=bool(scores.disagree[c]),
        reach=int(scores.reach[c]),
        priority=float(scores.priority[c]),
        position=place,
        row=row[0],
        row_item=row[1],
        row_items=row[2],
    )


def row_positions(grades: GradeFrame, order: IntArray) -> tuple[IntArray, IntArray, IntArray]:
    """Per cell, for an order that keeps each row's cells together (the uniform one): its row's 1-based
    place among the rows, its 1-based place within the row, and the row's number of cells."""
    entry = grades.entry[order]
    first = np.r_[True, entry[1:] != entry[:-1]] if len(order) else np.zeros(0, dtype=bool)
    row_of = np.cumsum(first)
    starts = np.flatnonzero(first)
    sizes = np.diff(np.r_[starts, len(order)])
    row, item, size = (np.zeros(len(order), dtype=np.int64) for _ in range(3))
    row[order] = row_of
    item[order] = np.arange(len(order)) - starts[row_of - 1] + 1
    size[order] = sizes[row_of - 1]
    return row, item, size


@dataclass(frozen=True, slots=True)
class _Uniform:
    """One seed's uniform order of a kept queue, and where each row begins in it (0-based, ascending)."""

    order: npt.NDArray[np.int32]
    starts: IntArray


MAX_SEEDS = 4  # uniform orders kept per queue: the judges working on it at once (4 bytes a cell each)


def _seed_orders() -> Kept[int, _Uniform]:
    return Kept(MAX_SEEDS)


def _row_of(uniform: _Uniform | None, positions: list[int]) -> list[tuple[int, int, int]]:
    """``row_positions`` of the cells at 0-based ``positions`` of the uniform order, from its row starts
    alone; zeros in priority mode (rows are not kept together)."""
    if uniform is None:
        return [(0, 0, 0)] * len(positions)
    starts, n = uniform.starts, len(uniform.order)
    result = []
    for p in positions:
        row = int(np.searchsorted(starts, p, side="right"))  # 1-based: the rows begun at or before p
        end = int(starts[row]) if row < len(starts) else n
        result.append((row, p - int(starts[row - 1]) + 1, end - int(starts[row - 1])))
    return result


def _judge_order(
    kept: _Scored, collection: Collection, request: QueueRequest
) -> tuple[npt.NDArray[np.integer[Any]], int | None, _Uniform | None]:
    """The judge's order of every cell (reviewed ones included), the seed used and the kept uniform order."""
    if request.mode == "priority":
        return kept.order, None, None
    seed = request.seed if request.seed is not None else judge_seed(collection.name, request.judge)
    uniform = kept.uniform.get_or_compute(seed, lambda: _uniform_of(kept, seed))
    return uniform.order, seed, uniform


def _uniform_of(kept: _Scored, seed: int) -> _Uniform:
    order = uniform_order(kept.grades, seed, row_places(kept.row_ids, seed))
    entry = kept.grades.entry[order]
    starts = np.flatnonzero(np.r_[True, entry[1:] != entry[:-1]]) if len(order) else np.zeros(0, np.int64)
    return _Uniform(order.astype(np.int32), starts.astype(np.int64))


def _prepare(session: Session, collection: Collection, request: QueueRequest) -> tuple[GraderRef, _Scored, int | None]:
    request.check()
    grader = resolve_grader(session, collection, grader_id=request.grader_id)
    kept, version = _scored(session, collection, grader, request)
    return grader, kept, version


def next_cells(
    session: Session, collection: Collection, request: QueueRequest, *, limit: int = 1, offset: int = 0
) -> Queue:
    """The next ``limit`` cells of the judge's queue after skipping ``offset`` unreviewed ones."""
    params.bounded("limit", limit, LIMIT)
    params.bounded("offset", offset, OFFSET)
    grader, kept, version = _prepare(session, collection, request)
    grades = kept.grades
    order, seed, uniform = _judge_order(kept, collection, request)
    query_of_cell = grades.pool.entry_query[grades.entry]
    per_query_counts = np.bincount(query_of_cell, minlength=len(grades.pool.query_ids))
    per_query = {q: int(n) for q, n in zip(grades.pool.query_ids, per_query_counts.tolist(), strict=True) if n}
    places = np.empty(len(order), dtype=np.int64)
    places[order] = np.arange(1, len(order) + 1)
    if request.query_id is not None:
        if request.query_id not in grades.pool.query_ids:
            raise NotFound(f"no query {request.query_id!r} with grades in this queue")
        order = order[query_of_cell[order] == grades.pool.query_ids.index(request.query_id)]
    done = _done_cells(kept, reviewed_cells(session, collection, request))
    done |= _flagged_cells(kept, flagged_ids(session, collection))
    left = order[~done[order]]
    chosen = left[offset : offset + limit].tolist()
    rows = _row_of(uniform, [int(places[c]) - 1 for c in chosen])
    cells = tuple(_cell(kept, int(c), int(places[c]), r) for c, r in zip(chosen, rows, strict=True))
    return Queue(grader, request.mode, seed, version, cells, len(left), len(order), per_query)


def _done_cells(kept: _Scored, reviewed: set[tuple[int, str]]) -> BoolArray:
    done = np.zeros(len(kept.grades.entry), dtype=bool)
    for pk, item in reviewed:
        c = kept.cell(pk, item)
        if c is not None:
            done[c] = True
    return done


def _flagged_cells(kept: _Scored, flagged: frozenset[str]) -> BoolArray:
    """Cells of questions flagged as spurious: a judge's time is not spent on a question already in doubt."""
    flagged_items = np.array([item in flagged for item in kept.grades.items], dtype=bool)
    if not flagged_items.any():
        return np.zeros(len(kept.grades.entry), dtype=bool)
    return flagged_items[kept.grades.item]


def find_cell(
    session: Session, collection: Collection, request: QueueRequest, pool_entry: int, item_id: str
) -> QueueCell:
    """One given cell of the queue with its scores and place (the cell an undo brought back)."""
    _, kept, _ = _prepare(session, collection, request)
    c = kept.cell(pool_entry, item_id)
    if c is None:
        raise NotFound("this cell is not in the review queue")
    order, _, uniform = _judge_order(kept, collection, request)
    position = int(np.flatnonzero(order == c)[0])
    [row] = _row_of(uniform, [position])
    return _cell(kept, c, position + 1, row)


def in_uniform_sample(
    session: Session, collection: Collection, judge: str, grader_id: int | None, pool_entry: int
) -> bool:
    """Whether a judge's action on row ``pool_entry`` may count as a uniform-sample ("sample") action.

    Only when the row is within reach of the judge's walk along their uniform order: at most
    ``MAX_SKIPPED_ROWS`` rows before it are still open (a cell neither overridden nor flagged) with
    no sample action of this judge, i.e. rows the judge skipped whole (the page's skip; a partly
    graded row is not counted, the page shows its skipped cells again). A row further on was
    picked by the judge (a query filter, a hand-made request), not by the seed, and would make
    ``ppi_sample.reached_rows`` count every row up to it as reached.
    """
    request = QueueRequest(judge=judge, mode="uniform", grader_id=grader_id)
    _, kept, _ = _prepare(session, collection, request)
    e = kept.entry_of.get(pool_entry)
    if e is None:
        return False
    places = row_places(kept.row_ids, judge_seed(collection.name, judge))
    done = _done_cells(kept, reviewed_cells(session, collection, request))
    done |= _flagged_cells(kept, flagged_ids(session, collection))
    skipped = np.zeros(len(places), dtype=bool)
    skipped[kept.grades.entry[~done]] = True
    for pk in _sample_rows(session, collection, judge):
        if pk in kept.entry_of:
            skipped[kept.entry_of[pk]] = False
    return int((skipped & (places < places[e])).sum()) <= MAX_SKIPPED_ROWS


def _sample_rows(session: Session, collection: Collection, judge: str) -> list[int]:
    """Pool entry pks of the rows with a (not undone) sample action of ``judge``."""
    return list(
        session.scalars(
            select(OverrideEvent.pool_entry_pk)
            .where(
                OverrideEvent.collection_id == collection.id,
                OverrideEvent.judge == judge,
                OverrideEvent.source == "sample",
                OverrideEvent.undone.is_(False),
            )
            .distinct()
        )
    )


def clear() -> None:
    """Forget every kept queue and row ids (a test's database copy reuses the seed's structure tokens)."""
    _kept.clear()
    _row_ids.clear()
