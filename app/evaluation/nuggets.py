"""Nugget scores (TREC RAG 2024's AutoNuggetizer) and the importance-weighted Cover, from our grades.

Definitions followed (facts, not code): Pradeep et al., "Initial Nugget Evaluation Results for the
TREC 2024 RAG Track with the AutoNuggetizer Framework" (arXiv 2411.09607) and the nuggetizer
package's metrics (castorini/nuggetizer): each nugget is *vital* or *okay*; each (response,
nugget) pair is assigned *support*, *partial_support* or *not_support*; a response's

    All          = Σ_{i ∈ N_q} s_i / |N_q|
    Vital        = Σ_{i ∈ V_q} s_i / |V_q|
    Weighted     = Σ_{i ∈ N_q} w_i s_i / Σ_{i ∈ N_q} w_i,   w = 1 for vital, 0.5 for okay
    Strict All, Strict Vital, Strict Weighted: the same with partial support counting 0,

with s_i = 1 for support, 0.5 for partial support, 0 otherwise. A system's score is the mean of
its responses' scores over the queries it answers.

How our data maps onto those terms:

* a *response* of system m to query q is the passages m ranks within ``top_k`` for q (for an
  imported RAG response, the response's own passages: all of it). Like Cover, a query where m ranks
  no graded passage within k is absent, not zero;
* N_q, the query's nuggets, are the items seen in q's grades (Cover's Q_q); V_q those whose
  importance is vital — an item without importance counts as vital, so on a plain question bank
  Vital = All and Weighted = All;
* a nugget's assignment in a response is the best support any of its passages gives it, each
  passage's 0–5 self-rating read through a ``SupportScale`` (default: ≥ 4 support, 3 partial,
  else none). For boolean (not self-rated) grades an answered item is supported;
* w_i is the item's explicit weight when it has one, else 1.0 for vital (or unspecified) and 0.5
  for okay, AutoNuggetizer's weighting.

x/0 = 0 throughout (a query without vital nuggets has Vital 0), as in nuggetizer's metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from scipy import sparse

from app.errors import Invalid
from app.evaluation.cover import OVERALL, CoverTable
from app.evaluation.frame import NO_RATING, BoolArray, FloatArray, GradeFrame, IntArray, RankingFrame
from app.evaluation.stats import mean_stderr
from app.evaluation.types import SystemScore

VITAL, OKAY = "vital", "okay"
IMPORTANCES = (VITAL, OKAY)
DEFAULT_WEIGHT = {VITAL: 1.0, OKAY: 0.5}  # AutoNuggetizer's weighted score; None (unspecified) weighs as vital
MAX_RATING = 5


@dataclass(frozen=True, slots=True)
class Importance:
    """One nugget's importance: vital or not, and its weight in the weighted scores."""

    vital: bool = True
    weight: float = 1.0

    @classmethod
    def of(cls, importance: str | None, weight: float | None = None) -> Importance:
        """From a bank item's ``importance`` ("vital" | "okay" | None) and explicit ``weight`` (None: the default)."""
        if importance is not None and importance not in IMPORTANCES:
            raise Invalid(f"importance must be one of {', '.join(IMPORTANCES)}, got {importance!r}")
        vital = importance != OKAY
        if weight is None:
            weight = DEFAULT_WEIGHT[OKAY] if not vital else DEFAULT_WEIGHT[VITAL]
        if not weight >= 0.0 or weight == float("inf"):
            raise Invalid(f"weight must be a finite number ≥ 0, got {weight!r}")
        return cls(vital, float(weight))


# item id → importance; an item absent from the map is vital with weight 1
Importances = Mapping[str, Importance]
UNSPECIFIED = Importance()


@dataclass(frozen=True, slots=True)
class SupportScale:
    """The mapping from a 0–5 self-rating to support (≥ ``support``), partial (≥ ``partial``) or none.

    The default (4, 3) reads the nugget prompt's scale (spec §1.4.3): 5 "detailed, clear coverage"
    and 4 "sufficient coverage, minor omissions" support the nugget; 3 "mentioned, some
    inaccuracies or lacks detail" supports it partially; 2 "briefly mentioned, significant
    omissions or inaccuracies" and below do not. 4 is also the papers' strict relevance cut
    ("Pencils Down!", EXAM++: a rating ≥ 4 is relevant unless stated otherwise).
    """

    support: int = 4
    partial: int = 3

    def __post_init__(self) -> None:
        if not 0 <= self.partial <= self.support <= MAX_RATING:
            raise Invalid(
                f"the support scale needs 0 ≤ partial ≤ support ≤ {MAX_RATING}, "
                f"got support={self.support}, partial={self.partial}"
            )

    @property
    def is_default(self) -> bool:
        return self == SupportScale()

    def credit(self, rating: IntArray) -> FloatArray:
        """Per cell: 1.0 (support), 0.5 (partial) or 0.0; a cell without a rating is 0."""
        rated = rating != NO_RATING
        values: FloatArray = np.where(
            rated & (rating >= self.support), 1.0, np.where(rated & (rating >= self.partial), 0.5, 0.0)
        )
        return values

    def credit_of(self, rating: int | None) -> float:
        """The same for one rating (the readable form the tests' oracle uses)."""
        if rating is None or rating == NO_RATING:
            return 0.0
        return 1.0 if rating >= self.support else 0.5 if rating >= self.partial else 0.0


class Subset(StrEnum):
    """Which nuggets a score averages over, and how."""

    ALL = "all"
    VITAL = "vital"
    WEIGHTED = "weighted"


def cell_credit(grades: GradeFrame, scale: SupportScale) -> FloatArray:
    """Per cell, the support a passage gives an item: the scale on self-ratings, answered = 1 otherwise."""
    if grades.is_self_rated:
        return scale.credit(grades.rating)
    answered: FloatArray = grades.correct.astype(np.float64)
    return answered


def _item_vectors(grades: GradeFrame, importances: Importances) -> tuple[FloatArray, FloatArray]:
    """Per item code: 1.0 if vital (else 0.0), and its weight."""
    looked_up = [importances.get(item, UNSPECIFIED) for item in grades.items]
    vital = np.asarray([1.0 if i.vital else 0.0 for i in looked_up], dtype=np.float64)
    weight = np.asarray([i.weight for i in looked_up], dtype=np.float64)
    return vital.reshape(-1), weight.reshape(-1)


def _per_query_total(grades: GradeFrame, cells: BoolArray | slice, values: FloatArray) -> FloatArray:
    """Σ values[i] over the distinct items i among ``cells``, per query."""
    n_queries, n_items = len(grades.pool.query_ids), max(len(grades.items), 1)
    pairs = np.unique(grades.pool.entry_query[grades.entry[cells]] * n_items + grades.item[cells])
    summed = np.bincount(pairs // n_items, weights=values[pairs % n_items], minlength=n_queries)
    totals: FloatArray = np.asarray(summed, dtype=np.float64)
    return totals


def _responses(grades: GradeFrame, rankings: RankingFrame, top_k: int) -> sparse.csr_matrix:
    """T[(m, q), p] = 1 for the graded passages p that m ranks at raw rank ≤ k for q (Cover's Top_k)."""
    pool, n_queries = grades.pool, len(grades.pool.query_ids)
    is_graded = np.zeros(pool.n_entries, dtype=bool)
    is_graded[grades.entry] = True
    top = (rankings.rank <= top_k) & is_graded[rankings.entry]
    row = rankings.system[top] * n_queries + pool.entry_query[rankings.entry[top]]
    shape = (len(rankings.systems) * n_queries, pool.n_entries)
    return sparse.csr_matrix((np.ones(len(row)), (row, rankings.entry[top])), shape=shape)


def _reached(responses: sparse.csr_matrix, grades: GradeFrame, cells: BoolArray) -> sparse.csr_matrix:
    """R[(m, q), i] = 1 where some passage of m's response to q has a cell of item i among ``cells``."""
    shape = (grades.pool.n_entries, max(len(grades.items), 1))
    incidence = sparse.csr_matrix((np.ones(int(cells.sum())), (grades.entry[cells], grades.item[cells])), shape=shape)
    reached = sparse.csr_matrix(responses @ incidence)
    reached.data[:] = 1.0
    return reached


# per system: {query: score}
NuggetTable = dict[str, dict[str, float]]


def nugget_table(
    grades: GradeFrame,
    rankings: RankingFrame,
    importances: Importances,
    *,
    subset: Subset,
    strict: bool,
    scale: SupportScale = SupportScale(),
    top_k: int = 20,
) -> NuggetTable:
    """Per system, per query it answers: the AutoNuggetizer score ``subset`` (module docstring).

    Vectorised: with T the responses (``_responses``), S[p, i] = 1 where p supports i and
    P[p, i] = 1 where p supports i at least partially, the supported nuggets of each response are
    the non-zeros of T·S and the at-least-partially supported ones those of T·P; with v the
    per-item values of ``subset`` (1, vital indicator or weight),
        score = (T·S)·v + ½ ((T·P)·v − (T·S)·v)   (strict: the first term only)
    divided by Σ_{i ∈ N_q} v_i.
    """
    n_queries = len(grades.pool.query_ids)
    vital, weight = _item_vectors(grades, importances)
    values = {Subset.ALL: np.ones(len(grades.items)), Subset.VITAL: vital, Subset.WEIGHTED: weight}[subset]
    denominator = _per_query_total(grades, slice(None), values)
    credit = cell_credit(grades, scale)
    responses = _responses(grades, rankings, top_k)
    supported = _reached(responses, grades, credit >= 1.0) @ values
    numerator = np.asarray(supported, dtype=np.float64)
    if not strict:
        partly = _reached(responses, grades, credit >= 0.5) @ values
        numerator = numerator + 0.5 * (np.asarray(partly, dtype=np.float64) - numerator)
    present = np.flatnonzero(responses.getnnz(axis=1))
    table: NuggetTable = {system: {} for system in rankings.systems}
    for row in present.tolist():
        q = row % n_queries
        total = float(denominator[q])
        score = float(numerator[row]) / total if total > 0 else 0.0
        table[rankings.systems[row // n_queries]][grades.pool.query_ids[q]] = score
    return table


def nugget_scores_of(table: NuggetTable) -> list[SystemScore]:
    """Per system: mean ± stderr over the queries it answers."""
    scores = []
    for system, values in table.items():
        mean, stderr = mean_stderr(list(values.values()))
        scores.append(SystemScore(system=system, score=mean, stderr=stderr, per_query=values))
    return scores


def weighted_cover_table(
    grades: GradeFrame,
    rankings: RankingFrame,
    importances: Importances,
    *,
    min_rating: int | None,
    top_k: int = 20,
) -> CoverTable:
    """Cover where each item counts with its weight: per system ({query: EXAM_w}, {query: n-EXAM_w}).

    With Q_q, C_q and cov_τ as in ``cover_table`` and w_i the item's weight:
        EXAM_w(m, q)  = Σ_{i ∈ ⋃_{p ∈ Top_k(m,q)} cov_τ(p)} w_i / Σ_{i ∈ Q_q} w_i
        nEXAM_w(m, q) = the same sum / Σ_{i ∈ C_q} w_i,   x/0 = 0.
    With every weight 1 this is ``cover_table``, value for value. ``_overall_`` gets
    EXAM_w = Σ_{C_q} w / Σ_{Q_q} w and nEXAM_w = 1.
    """
    pool, n_queries = grades.pool, len(grades.pool.query_ids)
    _, weight = _item_vectors(grades, importances)
    covered = grades.covered(min_rating)
    seen, coverable = _per_query_total(grades, slice(None), weight), _per_query_total(grades, covered, weight)
    responses = _responses(grades, rankings, top_k)
    union = np.asarray(_reached(responses, grades, covered) @ weight, dtype=np.float64)
    present = np.flatnonzero(responses.getnnz(axis=1))
    graded_queries = np.unique(pool.entry_query[grades.entry]).tolist()
    table: CoverTable = {
        OVERALL: (
            {pool.query_ids[q]: _share(coverable[q], seen[q]) for q in graded_queries},
            {pool.query_ids[q]: 1.0 for q in graded_queries},
        ),
        **{system: ({}, {}) for system in rankings.systems},
    }
    for row in present.tolist():
        q = row % n_queries
        exam, n_exam = table[rankings.systems[row // n_queries]]
        exam[pool.query_ids[q]] = _share(union[row], seen[q])
        n_exam[pool.query_ids[q]] = _share(union[row], coverable[q])
    return table


def _share(numerator: float, denominator: float) -> float:
    return float(numerator) / float(denominator) if denominator > 0 else 0.0
