"""The leaderboard and compare analyses: what the leaderboard and compare pages show and the CLI prints.

Each returns a frozen value; the web and the CLI only render it (app/web/routes/analysis.py,
app/cli.py), so both answer the same numbers for the same request.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from app.collections.queries import GraderRef
from app.collections.service import official_leaderboard
from app.evaluation.correlation import rank_correlation, scores_to_ranks
from app.evaluation.cover import OVERALL
from app.evaluation.formatting import Table, nan_to_none
from app.evaluation.types import Leaderboard
from app.leaderboards.measures import TrecMeasure
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


@dataclass(frozen=True, slots=True)
class LeaderboardAnalysis:
    """One leaderboard: the board, each system's predicted rank, and (trec measures) per-query correlation."""

    request: LeaderboardRequest
    grader: GraderRef
    board: Leaderboard
    predicted: Mapping[str, float]  # system → rank on this board (best = 1), the overall row left out
    per_query: PerQueryCorrelation | None


def leaderboard_analysis(
    session: Session,
    collection: Collection,
    request: LeaderboardRequest,
    *,
    official: dict[str, float] | None = None,
    per_query_level: int | None = None,
) -> LeaderboardAnalysis:
    """The leaderboard of ``request`` against ``official`` (default: the imported official ranks).

    With ``per_query_level`` and a trec measure, also the per-query correlation against the manual
    judgments at that relevance level; Cover has no manual counterpart and gets none.
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
    return LeaderboardAnalysis(request, data.grader, board, predicted_ranks(board), per_query)


def leaderboard_analysis_json(analysis: LeaderboardAnalysis) -> dict[str, Any]:
    """``rubric leaderboard --format json`` and the web's ``leaderboard.json``: one contract."""
    return {**leaderboard_json(analysis.board, analysis.per_query), "grader_id": analysis.grader.id}


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
