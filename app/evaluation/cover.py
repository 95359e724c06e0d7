"""EXAM Cover and n-EXAM (spec §2.2)."""

from __future__ import annotations

import numpy as np
from scipy import sparse

from app.evaluation.frame import BoolArray, GradeFrame, IntArray, RankingFrame, frames_of
from app.evaluation.stats import mean_stderr
from app.evaluation.types import GradedPool, Rankings, SystemScore

OVERALL = "_overall_"
PRESENCE_TABLE_MAX = 1 << 22  # (query, item) pairs counted in a dense table (4M bins, 32 MB at most)
# per system (and _overall_): ({query: EXAM}, {query: n-EXAM})
CoverTable = dict[str, tuple[dict[str, float], dict[str, float]]]


def _items_per_query(grades: GradeFrame, cells: BoolArray | slice) -> IntArray:
    """|{distinct items among ``cells``}| per query."""
    n_queries, n_items = len(grades.pool.query_ids), max(len(grades.items), 1)
    pairs = grades.pool.entry_query[grades.entry[cells]] * n_items + grades.item[cells]
    if n_queries * n_items <= PRESENCE_TABLE_MAX:  # a (query, item) presence table: linear, no sort
        seen = np.bincount(pairs, minlength=n_queries * n_items).reshape(n_queries, n_items) > 0
        per_query: IntArray = seen.sum(axis=1)
        return per_query
    counts: IntArray = np.bincount(np.unique(pairs) // n_items, minlength=n_queries)
    return counts


def _ratio(numerator: IntArray, denominator: IntArray) -> list[float]:
    """numerator / denominator elementwise, x/0 = 0 (exact IEEE division of the integer counts)."""
    safe = np.where(denominator > 0, denominator, 1)
    values: list[float] = np.where(denominator > 0, numerator / safe, 0.0).tolist()
    return values


def cover_table(grades: GradeFrame, rankings: RankingFrame, *, min_rating: int | None, top_k: int = 20) -> CoverTable:
    """Per system: ({query: EXAM}, {query: n-EXAM}).

    With Q_q the item ids seen in q's grades, C_q = ⋃_{p ∈ P_q} cov_τ(p) and
    Top_k(m, q) the graded passages that m ranks at raw rank ≤ k (inclusive):
        EXAM(m, q)  = |⋃_{p ∈ Top_k(m,q)} cov_τ(p)| / |Q_q|
        nEXAM(m, q) = |⋃_{p ∈ Top_k(m,q)} cov_τ(p)| / |C_q|,   x/0 = 0.
    A query where m ranks no graded passage in its top k is absent, not zero. ``_overall_`` gets
    EXAM = |C_q| / |Q_q| and nEXAM = 1.

    The unions are counted at once for every (system, query) as the non-zeros of T·V, with
    T[(m, q), p] = 1 for p ∈ Top_k(m, q) and V[p, i] = 1 for i ∈ cov_τ(p).
    """
    pool, n_queries = grades.pool, len(grades.pool.query_ids)
    covered = grades.covered(min_rating)
    seen, coverable = _items_per_query(grades, slice(None)), _items_per_query(grades, covered)
    graded_query = np.zeros(n_queries, dtype=bool)
    graded_query[pool.entry_query[grades.entry]] = True
    is_graded = np.zeros(pool.n_entries, dtype=bool)
    is_graded[grades.entry] = True

    top = (rankings.rank <= top_k) & is_graded[rankings.entry]
    pair = rankings.system[top] * n_queries + pool.entry_query[rankings.entry[top]]
    shape = (len(rankings.systems) * n_queries, pool.n_entries)
    in_top = sparse.csr_matrix((np.ones(len(pair)), (pair, rankings.entry[top])), shape=shape)
    covers = sparse.csr_matrix(
        (np.ones(int(covered.sum())), (grades.entry[covered], grades.item[covered])),
        shape=(pool.n_entries, max(len(grades.items), 1)),
    )
    union = (in_top @ covers).getnnz(axis=1)
    present = np.flatnonzero(in_top.getnnz(axis=1))

    overall = _ratio(coverable, seen)
    graded_queries = np.flatnonzero(graded_query).tolist()
    table: CoverTable = {
        OVERALL: (
            {pool.query_ids[q]: overall[q] for q in graded_queries},
            {pool.query_ids[q]: 1.0 for q in graded_queries},
        ),
        **{system: ({}, {}) for system in rankings.systems},
    }
    query_of = present % n_queries
    exam = _ratio(union[present], seen[query_of])
    n_exam = _ratio(union[present], coverable[query_of])
    for row, q, e, n in zip(present.tolist(), query_of.tolist(), exam, n_exam, strict=True):
        values = table[rankings.systems[row // n_queries]]
        values[0][pool.query_ids[q]] = e
        values[1][pool.query_ids[q]] = n
    return table


def cover_scores_of(table: CoverTable, *, normalized: bool = False) -> list[SystemScore]:
    """Cover (or n-Cover with ``normalized``) per system: mean ± stderr over the queries it covers."""
    scores = []
    for system, (exam, n_exam) in table.items():
        values = n_exam if normalized else exam
        mean, stderr = mean_stderr(list(values.values()))
        scores.append(SystemScore(system=system, score=mean, stderr=stderr, per_query=values))
    return scores


def cover_per_query(graded: GradedPool, rankings: Rankings, *, min_rating: int | None, top_k: int = 20) -> CoverTable:
    """``cover_table`` on the dict forms."""
    return cover_table(*frames_of(graded, rankings), min_rating=min_rating, top_k=top_k)


def cover_scores(
    graded: GradedPool,
    rankings: Rankings,
    *,
    min_rating: int | None,
    top_k: int = 20,
    normalized: bool = False,
) -> list[SystemScore]:
    """Cover (or n-Cover) per system on the dict forms."""
    return cover_scores_of(cover_per_query(graded, rankings, min_rating=min_rating, top_k=top_k), normalized=normalized)
