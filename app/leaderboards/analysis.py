"""The leaderboard and compare analyses: what the leaderboard and compare pages show and the CLI prints.

Each returns a frozen value; the web and the CLI only render it (app/web/routes/analysis.py,
app/cli.py), so both answer the same numbers for the same request.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.orm import Session

from app.collections.queries import GraderRef
from app.collections.service import official_leaderboard
from app.evaluation.correlation import rank_correlation, scores_to_ranks
from app.evaluation.cover import OVERALL
from app.evaluation.formatting import Table, nan_to_none
from app.evaluation.significance import (
    DEFAULT_TRIALS,
    PairTest,
    Significance,
    adjacent_significance,
    all_pairs_significance,
    min_holm_p,
)
from app.evaluation.types import Leaderboard, SystemScore
from app.kept import Kept
from app.leaderboards import params
from app.leaderboards.measures import TrecMeasure
from app.leaderboards.ppi import PPIBoard, ppi_board, ppi_json
from app.leaderboards.service import (
    LeaderboardRequest,
    PerQueryCorrelation,
    build_leaderboard,
    evaluation_data,
    leaderboard_json,
    manual_per_query_correlation,
    predicted_ranks,
)
from app.models import Collection

OVERALL_EXPLANATION = {
    "cover": "the share of each query's items that any pooled passage covers (the union over the whole "
    "pool, at the threshold), averaged over queries: the ceiling a system could reach.",
    "n-cover": "n-Cover's denominator is what the whole pool covers, so the pool itself scores 1 on every "
    "query: the ceiling.",
    "cover-weighted": "the weight share of each query's items that any pooled passage covers (vital 1, okay "
    "0.5 unless an item has its own weight), averaged over queries: the ceiling a system could reach.",
    "n-cover-weighted": "the pool covers all it covers, so it scores 1 on every query: the ceiling.",
}
SCORE_DECIMALS = 3  # the precision the board prints, and at which systems tie


@dataclass(frozen=True, slots=True)
class RankedSystem:
    """A system's place on the board: competition rank on the printed score, and its query count.

    Ranks are standard competition ranks ("1, 2, 2, 4") of the score rounded to ``SCORE_DECIMALS``:
    two systems a reader sees with the same score share a rank, so the board never ranks a
    difference it does not show. (``predicted`` keeps mean ranks of the exact scores for the
    correlations, as the reference does.) ``n_queries`` counts the queries with a score for the
    system (for Cover: where it ranks a graded passage in its top k).
    """

    system: str
    rank: int
    tied: bool
    n_queries: int


@dataclass(frozen=True, slots=True)
class LeaderboardAnalysis:
    """One leaderboard: the board, ranks, significance of adjacent pairs, and (trec) per-query correlation.

    ``ranked`` follows the board's order without ``_overall_``, which ``overall`` holds (Cover only).
    """

    request: LeaderboardRequest
    grader: GraderRef
    board: Leaderboard
    predicted: Mapping[str, float]  # system → rank on this board (best = 1), the overall row left out
    per_query: PerQueryCorrelation | None
    ranked: tuple[RankedSystem, ...] = ()
    overall: SystemScore | None = None
    significance: Significance | None = None
    ppi: PPIBoard | None = None  # prediction-powered Cover and P@k (app/leaderboards/ppi.py), when asked for


def competition_ranks(board: Leaderboard, decimals: int = SCORE_DECIMALS) -> tuple[RankedSystem, ...]:
    """Competition ranks ("1, 2, 2, 4") of the board's systems (best first), on the score at ``decimals``."""
    systems = [s for s in board.systems if s.system != OVERALL]
    shown = [f"{s.score:.{decimals}f}" for s in systems]
    ranked = []
    for i, score in enumerate(systems):
        first = shown.index(shown[i])  # the board is sorted by score: equal printed scores are consecutive
        tied = shown.count(shown[i]) > 1
        ranked.append(RankedSystem(score.system, first + 1, tied, len(score.per_query)))
    return tuple(ranked)


def leaderboard_analysis(
    session: Session,
    collection: Collection,
    request: LeaderboardRequest,
    *,
    official: dict[str, float] | None = None,
    per_query_level: int | None = None,
    significance: bool = False,
    trials: int = DEFAULT_TRIALS,
    ppi: bool = False,
) -> LeaderboardAnalysis:
    """The leaderboard of ``request`` against ``official`` (default: the imported official ranks).

    With ``ppi``, the prediction-powered Cover and P@k of the same settings from the judges' uniform
    sample (app/leaderboards/ppi.py), systems in the board's order.

    With ``per_query_level`` and a trec measure, also the per-query correlation against the manual
    judgments at that relevance level; Cover has no manual counterpart and gets none. With
    ``significance``, each system against the next one down (paired randomisation test over their
    common queries, ``trials`` sign flips seeded by the bootstrap seed) and the groups it implies,
    and every pair of systems with Holm's correction (the same trials and seed, so a pair's raw
    p-value is the same in both lists; 59 systems × 54 queries at 10,000 trials take about 70 ms).
    """
    data = evaluation_data(session, collection, request)
    if official is None:
        official = official_leaderboard(session, collection) or None
    board = build_leaderboard(data, request, official)
    per_query = None
    if per_query_level is not None and isinstance(request.measure, TrecMeasure):
        derived = {s.system: s.per_query for s in board.systems if s.system != OVERALL}
        per_query = manual_per_query_correlation(
            session, collection, data, request, min_judgment=per_query_level, predicted=derived
        )
    ranked = competition_ranks(board)
    overall = next((s for s in board.systems if s.system == OVERALL), None)
    tests = None
    if significance:
        params.bounded("trials", trials, params.TRIALS)
        tests = board_significance(board, ranked, trials=trials, seed=request.bootstrap_seed)
    ppi_result = ppi_board(session, collection, request, order=[r.system for r in ranked]) if ppi else None
    return LeaderboardAnalysis(
        request, data.grader, board, predicted_ranks(board), per_query, ranked, overall, tests, ppi_result
    )


MAX_SIGNIFICANCE_CACHED = 64
_significance_cache: Kept[str, Significance] = Kept(MAX_SIGNIFICANCE_CACHED)


def board_significance(board: Leaderboard, ranked: tuple[RankedSystem, ...], *, trials: int, seed: int) -> Significance:
    """The adjacent-pair and all-pairs tests of ``board``, cached by content (order, per-query scores, trials, seed).

    Every open board re-fetches on the same event, and the page, its fragment and its export show
    one board: the tests are a pure function of what the key digests, so one computation serves all.
    """
    order = [r.system for r in ranked]
    per_system = {s.system: s.per_query for s in board.systems if s.system != OVERALL}
    content = repr((order, [sorted(per_system[s].items()) for s in order], trials, seed)).encode()
    key = hashlib.blake2b(content, digest_size=20).hexdigest()
    return _significance_cache.get_or_compute(key, lambda: _significance(order, per_system, trials, seed))


def _significance(
    order: list[str], per_system: Mapping[str, Mapping[str, float]], trials: int, seed: int
) -> Significance:
    adjacent = adjacent_significance(order, per_system, trials=trials, seed=seed)
    return replace(adjacent, all_pairs=all_pairs_significance(order, per_system, trials=trials, seed=seed))


def overall_explanation(measure: str) -> str | None:
    """What the ``_overall_`` row means for ``measure`` (None: the measure has no such row)."""
    return OVERALL_EXPLANATION.get(measure)


def leaderboard_analysis_json(analysis: LeaderboardAnalysis) -> dict[str, Any]:
    """``rubric leaderboard --format json`` and the web's ``leaderboard.json``: one contract."""
    result = {**leaderboard_json(analysis.board, analysis.per_query), "grader_id": analysis.grader.id}
    # competition ranks on the printed score, the overall row left out (``systems`` keeps its contract)
    result["ranks"] = {r.system: {"rank": r.rank, "tied": r.tied, "n_queries": r.n_queries} for r in analysis.ranked}
    if analysis.significance is not None:
        result["significance"] = significance_json(analysis.significance)
    if analysis.ppi is not None:
        result["ppi"] = ppi_json(analysis.ppi)
    return result


def significance_json(result: Significance) -> dict[str, Any]:
    """The adjacent-pair tests and groups, as ``--significance`` and ``leaderboard.json?significance=1`` give them."""
    return {
        "test": "paired randomisation (sign flip), two-sided; paired t-test alongside",
        "alpha": result.alpha,
        "trials": result.trials,
        "seed": result.seed,
        "groups": dict(result.groups),
        "adjacent": [
            {
                "better": t.better,
                "worse": t.worse,
                "n_queries": t.n_queries,
                "mean_difference": t.mean_difference,
                "p_randomisation": t.p_randomisation,
                "t": nan_to_none(t.t),
                "p_t": nan_to_none(t.p_t),
                "distinct": t.distinct,
            }
            for t in result.adjacent
        ],
        "all_pairs": {
            "correction": "Holm, over all pairs, each test its own family",
            "min_holm_p": min_holm_p(len(result.all_pairs), result.trials),
            "pairs": [_all_pairs_json(t) for t in result.all_pairs],
        },
    }


def _all_pairs_json(t: PairTest) -> dict[str, Any]:
    return {
        "better": t.better,
        "worse": t.worse,
        "n_queries": t.n_queries,
        "mean_difference": t.mean_difference,
        "p_randomisation": t.p_randomisation,
        "p_randomisation_holm": t.p_holm,
        "distinct": t.distinct,
        "t": nan_to_none(t.t),
        "p_t": nan_to_none(t.p_t),
        "p_t_holm": nan_to_none(t.p_t_holm),
        "distinct_t": t.distinct_t,
    }


def significance_table(result: Significance) -> Table:
    """The same tests as a table (``rubric leaderboard --significance`` in tsv, md or LaTeX)."""
    rows: list[list[Any]] = [
        [
            t.better,
            t.worse,
            result.groups[t.better],
            t.n_queries,
            t.mean_difference,
            t.p_randomisation,
            nan_to_none(t.t),
            nan_to_none(t.p_t),
            "yes" if t.distinct else "no",
        ]
        for t in result.adjacent
    ]
    return Table(
        title="Significance: each system vs the next one down",
        columns=["system", "next", "group", "n_queries", "mean_difference", "p_randomisation", "t", "p_t", "distinct"],
        rows=rows,
        footer=[
            f"paired randomisation test, two-sided, {result.trials} trials, seed {result.seed}; alpha {result.alpha}",
            "groups: " + ", ".join(f"{s}={g}" for s, g in result.groups.items()),
        ],
    )


def all_pairs_table(result: Significance) -> Table:
    """Every pair with Holm-adjusted p-values, in board order (the third table of ``--significance``)."""
    rows: list[list[Any]] = [
        [
            t.better,
            t.worse,
            t.n_queries,
            t.mean_difference,
            t.p_randomisation,
            t.p_holm,
            "yes" if t.distinct else "no",
            nan_to_none(t.p_t),
            nan_to_none(t.p_t_holm),
            "yes" if t.distinct_t else "no",
        ]
        for t in result.all_pairs
    ]
    floor = min_holm_p(len(result.all_pairs), result.trials)
    return Table(
        title="Significance: all pairs, Holm-corrected",
        columns=[
            "system",
            "other",
            "n_queries",
            "mean_difference",
            "p_randomisation",
            "p_randomisation_holm",
            "distinct",
            "p_t",
            "p_t_holm",
            "distinct_t",
        ],
        rows=rows,
        footer=[
            f"{len(result.all_pairs)} pairs; Holm over all pairs, per test; alpha {result.alpha}",
            f"{result.trials} trials allow a Holm-adjusted randomisation p of at least {floor:.3g}",
        ],
    )


@dataclass(frozen=True, slots=True)
class AllPairsSummary:
    """Every pair, most clearly different first, with the counts a reader looks for first.

    Sorted by the Holm-adjusted randomisation p, then the Holm-adjusted t-test p, then the raw ones
    (an undefined t-test last):
    a list of 1,711 pairs at 59 systems reads top-down where a matrix would not fit a screen.
    ``floor`` is ``min_holm_p``: below it the randomisation family cannot go with these trials.
    """

    pairs: tuple[PairTest, ...]
    distinct: int
    distinct_t: int
    floor: float


def all_pairs_summary(result: Significance) -> AllPairsSummary:
    def key(t: PairTest) -> tuple[float, float, float, float, str, str]:
        # Holm ties at 1 for most pairs of a long board: the raw p-values keep "most different first" there
        t_holm, t_raw = (2.0, 2.0) if math.isnan(t.p_t) else (t.p_t_holm, t.p_t)
        return (t.p_holm, t_holm, t.p_randomisation, t_raw, t.better, t.worse)

    pairs = tuple(sorted(result.all_pairs, key=key))
    return AllPairsSummary(
        pairs,
        sum(t.distinct for t in pairs),
        sum(t.distinct_t for t in pairs),
        min_holm_p(len(pairs), result.trials),
    )


def significance_tables(result: Significance) -> list[Table]:
    """The adjacent-pair table, then the all-pairs one: what ``--significance`` appends to the board."""
    return [significance_table(result), all_pairs_table(result)]


@dataclass(frozen=True, slots=True)
class CompareRow:
    system: str
    a: float
    b: float
    rank_a: float
    rank_b: float

    @property
    def moved(self) -> float:
        """Places gained from A to B (positive: the system ranks higher on B)."""
        return self.rank_a - self.rank_b


@dataclass(frozen=True, slots=True)
class CompareAnalysis:
    """Two leaderboards of the same collection (rubric versions, graders): rank changes and Kendall τ.

    ``kendall`` is τ_b between the two boards' scores over the systems on both (None below two
    systems; NaN when one board is constant), via the core's ``rank_correlation``: τ_b of the
    average ranks equals τ_b of the scores, since ranking is monotone and keeps ties.
    """

    a: LeaderboardAnalysis
    b: LeaderboardAnalysis
    rows: tuple[CompareRow, ...]  # best on B first
    kendall: float | None


def compare_analysis(a: LeaderboardAnalysis, b: LeaderboardAnalysis) -> CompareAnalysis:
    scores_a = {s.system: s.score for s in a.board.systems if s.system in a.predicted}
    scores_b = {s.system: s.score for s in b.board.systems if s.system in b.predicted}
    common = sorted(set(scores_a) & set(scores_b))
    rows = tuple(
        sorted(
            (CompareRow(s, scores_a[s], scores_b[s], a.predicted[s], b.predicted[s]) for s in common),
            key=lambda r: (r.rank_b, r.system),
        )
    )
    kendall = None
    if len(common) > 1:
        ranks_b = scores_to_ranks({s: scores_b[s] for s in common})
        kendall = rank_correlation({s: scores_a[s] for s in common}, ranks_b).kendall
    return CompareAnalysis(a, b, rows, kendall)


def _side_json(side: LeaderboardAnalysis) -> dict[str, Any]:
    request = side.request
    return {
        "grader_id": side.grader.id,
        "grader": side.board.settings["grader"],
        "rubric_version": request.rubric_version,
        "measure": request.measure.name,
    }


def compare_json(result: CompareAnalysis) -> dict[str, Any]:
    """``rubric compare --format json`` and the web's ``compare.json``."""
    return {
        "a": _side_json(result.a),
        "b": _side_json(result.b),
        "kendall": None if result.kendall is None else nan_to_none(result.kendall),
        "systems": [
            {"system": r.system, "a": r.a, "b": r.b, "rank_a": r.rank_a, "rank_b": r.rank_b, "moved": r.moved}
            for r in result.rows
        ],
    }


def compare_table(result: CompareAnalysis) -> Table:
    kendall = "n/a" if result.kendall is None or math.isnan(result.kendall) else f"{result.kendall:.3f}"
    a, b = _side_json(result.a), _side_json(result.b)
    return Table(
        title=f"Compare: {result.a.request.measure}",
        columns=["system", "A", "rank_a", "B", "rank_b", "moved"],
        rows=[[r.system, r.a, r.rank_a, r.b, r.rank_b, r.moved] for r in result.rows],
        footer=[
            f"A: grader {a['grader_id']}, rubric version {a['rubric_version'] or 'all'}",
            f"B: grader {b['grader_id']}, rubric version {b['rubric_version'] or 'all'}",
            f"kendall\t{kendall}",
        ],
    )
