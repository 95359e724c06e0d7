"""EXAM Cover and n-EXAM (spec §2.2)."""

from __future__ import annotations

from collections.abc import Mapping

from app.evaluation.stats import mean_stderr
from app.evaluation.types import GradedPool, PassageGrade, Rankings, SystemScore

OVERALL = "_overall_"


def covered_items(grade: PassageGrade, min_rating: int | None) -> frozenset[str]:
    """cov_τ(p) = {i : rating(i, p) ≥ τ} for self-rated grades with τ given, else correctAnswered(p)."""
    if min_rating is not None and grade.is_self_rated:
        return frozenset(i for i, r in grade.ratings.items() if r >= min_rating)
    return grade.correct


def _frac(numerator: int, denominator: int) -> float:
    return numerator / denominator if denominator else 0.0


def _top_k_coverage(
    pool: Mapping[str, PassageGrade],
    ranked: Mapping[str, object],
    rank_of: Mapping[str, int],
    covered: Mapping[str, frozenset[str]],
    top_k: int,
) -> set[str] | None:
    in_top_k = [p for p in ranked if p in pool and rank_of[p] <= top_k]
    if not in_top_k:
        return None
    union: set[str] = set()
    for passage_id in in_top_k:
        union |= covered[passage_id]
    return union


def cover_per_query(
    graded: GradedPool, rankings: Rankings, *, min_rating: int | None, top_k: int = 20
) -> dict[str, tuple[dict[str, float], dict[str, float]]]:
    """Per system: ({query: EXAM}, {query: n-EXAM}).

    With Q_q the item ids seen in q's grades, C_q = ⋃_{p ∈ P_q} cov_τ(p) and
    Top_k(m, q) the graded passages that m ranks at raw rank ≤ k (inclusive):
        EXAM(m, q)  = |⋃_{p ∈ Top_k(m,q)} cov_τ(p)| / |Q_q|
        nEXAM(m, q) = |⋃_{p ∈ Top_k(m,q)} cov_τ(p)| / |C_q|,   x/0 = 0.
    A query where m ranks no graded passage in its top k is absent, not zero. ``_overall_`` gets
    EXAM = |C_q| / |Q_q| and nEXAM = 1.
    """
    result: dict[str, tuple[dict[str, float], dict[str, float]]] = {
        OVERALL: ({}, {}),
        **{system: ({}, {}) for system in rankings},
    }
    for query_id, pool in graded.items():
        all_items: set[str] = set()
        coverable: set[str] = set()
        covered: dict[str, frozenset[str]] = {}
        for passage_id, grade in pool.items():
            all_items |= grade.item_ids
            covered[passage_id] = covered_items(grade, min_rating)
            coverable |= covered[passage_id]
        result[OVERALL][0][query_id] = _frac(len(coverable), len(all_items))
        result[OVERALL][1][query_id] = 1.0
        for system, by_query in rankings.items():
            ranked = by_query.get(query_id)
            if not ranked:
                continue
            rank_of = {p: r.rank for p, r in ranked.items()}
            union = _top_k_coverage(pool, ranked, rank_of, covered, top_k)
            if union is None:
                continue
            result[system][0][query_id] = _frac(len(union), len(all_items))
            result[system][1][query_id] = _frac(len(union), len(coverable))
    return result


def cover_scores(
    graded: GradedPool,
    rankings: Rankings,
    *,
    min_rating: int | None,
    top_k: int = 20,
    normalized: bool = False,
) -> list[SystemScore]:
    """Cover (or n-Cover with ``normalized``) per system: mean ± stderr over the queries it covers."""
    per_query = cover_per_query(graded, rankings, min_rating=min_rating, top_k=top_k)
    scores = []
    for system, (exam, n_exam) in per_query.items():
        values = n_exam if normalized else exam
        mean, stderr = mean_stderr(list(values.values()))
        scores.append(SystemScore(system=system, score=mean, stderr=stderr, per_query=dict(values)))
    return scores
