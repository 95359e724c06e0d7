"""Question impact (spec §3): how much the Cover leaderboard's ranking depends on each item.

Removing item i of query q changes only q's column of the Cover table (``cover_table`` counts
unions per (system, query), and no other query sees i's cells), so the column is recomputed from the
frames cut to q and every other query's per-query value is reused: cost per item ∝ |q's cells|,
not |all cells|.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from scipy.stats import kendalltau

from app.errors import Invalid
from app.evaluation.cover import OVERALL, cover_table
from app.evaluation.frame import GradeFrame, RankingFrame
from app.leaderboards.measures import Cover
from app.leaderboards.service import EvaluationData, LeaderboardRequest

# system → {query: per-query value} (EXAM or n-EXAM)
Columns = dict[str, dict[str, float]]


@dataclass(frozen=True, slots=True)
class ScoreChange:
    system: str
    before: float
    after: float

    @property
    def delta(self) -> float:
        return self.after - self.before


@dataclass(frozen=True, slots=True)
class ItemImpact:
    """One item's impact: τ (NaN when undefined, e.g. all scores tied) and the scores that moved."""

    query_id: str
    item_id: str
    text: str
    tau: float
    changes: tuple[ScoreChange, ...]  # largest move first; systems whose score did not move are left out


def question_impact(
    data: EvaluationData,
    request: LeaderboardRequest,
    query_id: str | None = None,
    *,
    texts: Mapping[tuple[str, str], str] | None = None,
) -> tuple[ItemImpact, ...]:
    """For each item i of each query q (only ``query_id``'s when given), lowest τ first:

        τ(i) = Kendall τ_b( (S(m))_m , (S_{−i}(m))_m )   over the systems m (``_overall_`` excluded),

    with S(m) = mean over the queries m covers of its Cover (or n-Cover) per-query value, and
    S_{−i} the same on the grades without i's cells of q. Only column q differs:
        S_{−i}(m) = mean( {v(m, q') : q' ≠ q} ∪ {v_{−i}(m, q)} ),
    v_{−i}(m, q) absent when m ranks no passage still graded in its top k. Equal, bit for bit, to a
    full recompute (means are exact sums, ``math.fsum``, so the order of the queries does not matter).
    """
    if not isinstance(request.measure, Cover):
        raise Invalid(f"question impact is defined on Cover and n-Cover, not {request.measure}")
    normalized = request.measure.normalized
    pool = data.grades.pool
    if query_id is not None and query_id not in pool.query_ids:
        return ()
    base = _columns(
        cover_table(data.grades, data.ranking, min_rating=request.min_rating, top_k=request.top_k), normalized
    )
    systems = sorted(s for s in base if s != OVERALL)
    before = [_mean(base[s].values()) for s in systems]
    queries = [query_id] if query_id is not None else sorted(pool.query_ids)
    impacts = []
    for query in queries:
        grades, ranking = _cut_to_query(data.grades, data.ranking, pool.query_ids.index(query))
        for item_id in sorted({grades.items[i] for i in grades.item.tolist()}):
            table = cover_table(
                grades.without_item(query, item_id), ranking, min_rating=request.min_rating, top_k=request.top_k
            )
            column = _columns(table, normalized)
            after = [_mean(_replaced(base[s], query, column[s]).values()) for s in systems]
            tau = float(kendalltau(before, after).statistic) if len(systems) > 1 else float("nan")
            changes = sorted(
                (ScoreChange(s, b, a) for s, b, a in zip(systems, before, after, strict=True) if a != b),
                key=lambda c: (-abs(c.delta), c.system),
            )
            text = (texts or {}).get((query, item_id), "")
            impacts.append(ItemImpact(query, item_id, text, tau, tuple(changes)))
    return tuple(sorted(impacts, key=lambda r: (r.tau if r.tau == r.tau else 1.0, r.query_id, r.item_id)))


def _columns(table: Mapping[str, tuple[dict[str, float], dict[str, float]]], normalized: bool) -> Columns:
    return {system: values[1 if normalized else 0] for system, values in table.items()}


def _mean(values: Iterable[float]) -> float:
    """The leaderboard's mean (``mean_stderr``'s first value, fsum / n) without its costly exact stdev."""
    listed = list(values)
    return statistics.fmean(listed) if listed else 0.0


def _replaced(values: dict[str, float], query: str, column: dict[str, float]) -> dict[str, float]:
    """``values`` with query's entry taken from ``column`` (dropped when absent there)."""
    result = {q: v for q, v in values.items() if q != query}
    if query in column:
        result[query] = column[query]
    return result


def _cut_to_query(grades: GradeFrame, ranking: RankingFrame, query: int) -> tuple[GradeFrame, RankingFrame]:
    """Both frames restricted to one query's cells and ranking rows (same pool, same systems)."""
    entry_query = grades.pool.entry_query
    keep = entry_query[ranking.entry] == query
    cut = RankingFrame(
        ranking.pool,
        ranking.systems,
        ranking.system[keep],
        ranking.entry[keep],
        ranking.rank[keep],
        ranking.score[keep],
    )
    return grades.select(np.asarray(entry_query[grades.entry] == query)), cut
