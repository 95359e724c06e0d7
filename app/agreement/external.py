"""Another LLM judge's graded qrels (e.g. UMBRELA's 0–3) as a second judgment source: κ and a leaderboard.

``rubric import C --judgments-from NAME=FILE`` stores a judge's qrels in ``external_judgment`` rows of
source NAME, beside the manual judgments, which stay the truth. Two readings of them:

* agreement: Cohen's κ (app/evaluation/agreement.py) of our grader's derived label against the judge's
  grade, and of the judge's grade against the manual judgments, each at its own relevance level, with
  the confusion counts and the full cross-tabulation of the two scales;
* comparison: a leaderboard of trec_eval measures on the judge's qrels (app/evaluation/trec.py, the
  path of the derived qrels), rank-correlated (app/evaluation/correlation.py) with our grader's
  leaderboard on the same measure and with the official ranks.

The judge is named once at the boundary and resolved into an ``ExternalJudge`` (unknown: ``NotFound``
listing the imported judges).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.agreement.analysis import ITEM_THRESHOLD
from app.collections import queries
from app.collections.queries import GraderRef
from app.collections.service import official_leaderboard
from app.errors import Invalid, NotFound
from app.evaluation.agreement import Confusion, confusion_of
from app.evaluation.correlation import MissingSystemsError, rank_correlation, scores_to_ranks
from app.evaluation.cover import OVERALL
from app.evaluation.formatting import Table, nan_to_none
from app.evaluation.frame import GradeFrame
from app.evaluation.qrels import LabelRule, frame_labels
from app.evaluation.trec import MAX_MEASURE_NAME, top_depth, trec_scores
from app.evaluation.types import Correlation, Leaderboard, Qrels, SystemScore
from app.leaderboards import params
from app.leaderboards.measures import TrecMeasure
from app.leaderboards.service import (
    EvaluationData,
    LeaderboardRequest,
    leaderboard_json,
    load_evaluation_data,
    score_systems,
)
from app.models import Collection, ExternalJudgment

# UMBRELA grades 0 (nothing) · 1 (related) · 2 (highly relevant) · 3 (perfectly relevant): relevant = ≥ 2,
# as TREC RAG reads its qrels (trec_eval -l 2). Another judge's scale may be wider: up to 1000.
DEFAULT_MIN_EXTERNAL = 2
EXTERNAL_LEVEL = (1, 1000)
NAME_MAX = 200  # ExternalJudgment.source
DEFAULT_JUDGE_MEASURE = "NDCG@10"
MEASURE_MAX = MAX_MEASURE_NAME


@dataclass(frozen=True, slots=True)
class ExternalJudge:
    """One imported judgment source of a collection: its name and how many passages it judged."""

    name: str
    n_judgments: int


def external_judges(session: Session, collection: Collection) -> tuple[ExternalJudge, ...]:
    """The collection's imported judges, by name."""
    rows = session.execute(
        select(ExternalJudgment.source, func.count())
        .where(ExternalJudgment.collection_id == collection.id)
        .group_by(ExternalJudgment.source)
        .order_by(ExternalJudgment.source)
    ).all()
    return tuple(ExternalJudge(source, int(n)) for source, n in rows)


def import_hint(collection: Collection) -> str:
    return f"rubric import {collection.name} --judgments-from NAME=FILE"


def resolve_judge(session: Session, collection: Collection, name: str) -> ExternalJudge:
    """The imported judge ``name``, else ``NotFound`` listing the imported ones (or how to import one)."""
    judges = external_judges(session, collection)
    if len(name) <= NAME_MAX:
        for judge in judges:
            if judge.name == name:
                return judge
    shown = name if len(name) <= 40 else name[:40] + "…"
    if not judges:
        raise NotFound(
            f"no judge {shown!r}: no other judge's qrels are imported; import graded TREC qrels with "
            f"{import_hint(collection)} (e.g. umbrela=qrels.txt)"
        )
    raise NotFound(f"no judge {shown!r} in this collection; imported judges: {', '.join(j.name for j in judges)}")


def check_min_external(level: int) -> int:
    return params.bounded("min_external", level, EXTERNAL_LEVEL)


def external_qrels(session: Session, pool: queries.PoolKeys, judge: ExternalJudge) -> Qrels:
    """query → passage → the judge's grade, over the collection's pool."""
    rows = session.execute(
        select(ExternalJudgment.pool_entry_pk, ExternalJudgment.relevance).where(
            ExternalJudgment.collection_id == pool.collection_id, ExternalJudgment.source == judge.name
        )
    ).all()
    qrels: Qrels = {}
    for entry_pk, relevance in rows:
        key = pool.keys.get(entry_pk)
        if key is not None:
            qrels.setdefault(key[0], {})[key[1]] = int(relevance)
    return qrels


# -- agreement -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CrossTab:
    """counts[i][j] = passages the first side labelled ``rows[i]`` and the second ``columns[j]``."""

    rows: tuple[int, ...]
    columns: tuple[int, ...]
    counts: tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class PairAgreement:
    """Two labelings of the same passages: ``first`` ≥ its level predicts, ``second`` ≥ its level is the truth.

    ``kappa`` is NaN (JSON null) when the two share no passage, e.g. a collection without manual judgments.
    """

    first: str
    second: str
    first_level: int
    second_level: int
    confusion: Confusion
    kappa: float
    crosstab: CrossTab


@dataclass(frozen=True, slots=True)
class ExternalAgreement:
    """κ between our grader, the external judge and the manual judgments, pair by pair.

    Each pair counts the passages both sides labelled: the grader's graded pool entries, the
    judge's qrels, the manual judgments (a passage's best judgment). ``grader_vs_manual`` is
    restricted to the passages the judge also judged, so the two κ against the manual judgments
    are over the same passages.
    """

    judge: ExternalJudge
    grader: GraderRef
    min_external: int
    min_rating: int
    min_judgment: int
    grader_vs_judge: PairAgreement
    judge_vs_manual: PairAgreement
    grader_vs_manual: PairAgreement


def default_min_rating(grader: GraderRef) -> int:
    """A self-rated grader's label (max rating 0–5) counts from 4, as in the paper; a boolean one's from 1 answer."""
    return ITEM_THRESHOLD if grader.is_self_rated else 1


def external_agreement(
    session: Session,
    collection: Collection,
    judge: ExternalJudge,
    *,
    grader_id: int | None,
    min_external: int = DEFAULT_MIN_EXTERNAL,
    min_rating: int | None = None,
    min_judgment: int = params.DEFAULT_MANUAL_LEVEL,
) -> ExternalAgreement:
    """The three pairs at the given levels (checked here: ``Invalid`` names a level out of bounds)."""
    check_min_external(min_external)
    params.bounded("min_judgment", min_judgment, params.MIN_JUDGMENT_RANGE)
    if min_rating is not None:
        params.bounded("min_rating", min_rating, params.MIN_RATING)
    data = load_evaluation_data(session, collection, grader_id=grader_id)
    level = default_min_rating(data.grader) if min_rating is None else min_rating
    graded = _grader_labels(data.grades)
    judged = _as_labels(external_qrels(session, data.pool, judge))
    manual = _as_labels(
        {
            q: {p: max(js) for p, js in docs.items() if js}
            for q, docs in queries.load_judgments(session, data.pool).items()
        }
    )
    grader_name, manual_name = f"grader {data.grader.id}", "manual"
    with_judge = {key: label for key, label in manual.items() if key in judged}
    return ExternalAgreement(
        judge=judge,
        grader=data.grader,
        min_external=min_external,
        min_rating=level,
        min_judgment=min_judgment,
        grader_vs_judge=_pair(grader_name, judge.name, graded, judged, level, min_external),
        judge_vs_manual=_pair(judge.name, manual_name, judged, manual, min_external, min_judgment),
        grader_vs_manual=_pair(grader_name, manual_name, graded, with_judge, level, min_judgment),
    )


Labels = dict[tuple[str, str], int]  # (query, passage) → label


def _grader_labels(grades: GradeFrame) -> Labels:
    """The grader's derived label per graded passage: max rating (self-rated) or answered items (boolean)."""
    entries, labels = frame_labels(grades, LabelRule("max"))
    pool = grades.pool
    return {
        (pool.query_ids[int(pool.entry_query[e])], pool.passage_ids[e]): label
        for e, label in zip(entries.tolist(), labels.tolist(), strict=True)
    }


def _as_labels(qrels: Qrels) -> Labels:
    return {(q, p): label for q, docs in qrels.items() for p, label in docs.items()}


def _pair(first: str, second: str, a: Labels, b: Labels, a_level: int, b_level: int) -> PairAgreement:
    """Over the passages both label: predicted = a ≥ a_level, relevant = b ≥ b_level; κ of the two."""
    shared = sorted(a.keys() & b.keys())
    left = np.asarray([a[k] for k in shared], dtype=np.int64)
    right = np.asarray([b[k] for k in shared], dtype=np.int64)
    confusion = confusion_of(left >= a_level, right >= b_level)
    kappa = confusion.kappa() if shared else math.nan  # no passage in common: no agreement to speak of
    return PairAgreement(first, second, a_level, b_level, confusion, kappa, _crosstab(left, right))


def _crosstab(left: npt.NDArray[np.int64], right: npt.NDArray[np.int64]) -> CrossTab:
    rows, row_of = np.unique(left, return_inverse=True)
    columns, column_of = np.unique(right, return_inverse=True)
    counts = np.zeros((len(rows), len(columns)), dtype=np.int64)
    np.add.at(counts, (row_of, column_of), 1)
    return CrossTab(
        tuple(int(r) for r in rows), tuple(int(c) for c in columns), tuple(tuple(int(c) for c in r) for r in counts)
    )


# -- comparison: a leaderboard on the judge's qrels ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExternalComparison:
    """The leaderboard on the judge's qrels and its rank correlations.

    ``board.correlation`` is against the official ranks (None without them); ``against_grader``
    against our grader's leaderboard on the same measure (its derived qrels, the request's level);
    ``grader_against_official`` is that leaderboard's own correlation with the official ranks.
    """

    judge: ExternalJudge
    min_external: int
    board: Leaderboard
    grader_scores: dict[str, float]
    against_grader: Correlation | None
    grader_against_official: Correlation | None


def judge_measure(request: LeaderboardRequest) -> TrecMeasure:
    if not isinstance(request.measure, TrecMeasure):
        raise Invalid(
            f"a judge's qrels are scored with a trec_eval measure (NDCG@10, P@10, MAP…), not {request.measure}"
        )
    return request.measure


def external_comparison(
    session: Session,
    collection: Collection,
    judge: ExternalJudge,
    request: LeaderboardRequest,
    *,
    min_external: int = DEFAULT_MIN_EXTERNAL,
    official: dict[str, float] | None = None,
) -> ExternalComparison:
    """Score every system's ranking on the judge's qrels with the request's trec_eval measure at level
    ``min_external`` (trec_eval ``-l``; nDCG takes the grade as the gain), exactly as trec_eval on the
    judge's qrels file: a query the judge did not judge is left out, an unjudged passage counts 0."""
    measure = judge_measure(request)
    check_min_external(min_external)
    data = load_evaluation_data(session, collection, grader_id=request.grader_id)
    if official is None:
        official = official_leaderboard(session, collection) or None
    at_level = measure.at(min_external)
    raw = trec_scores(external_qrels(session, data.pool, judge), data.ranking.runs(top_depth(at_level)), at_level)
    scores = {s.system: s.score for s in raw if s.system != OVERALL}
    grader_scores = _grader_scores(data, request)
    board = Leaderboard(
        measure=measure.name,
        systems=sorted(
            (_with_rank(s, official) for s in raw if s.system != OVERALL), key=lambda s: (-s.score, s.system)
        ),
        correlation=_correlation(scores, official),
        settings={"judge": judge.name, "min_external": min_external, "grader": queries.describe_grader(data.grader)},
    )
    return ExternalComparison(
        judge=judge,
        min_external=min_external,
        board=board,
        grader_scores=grader_scores,
        against_grader=_correlation(scores, scores_to_ranks(grader_scores) if grader_scores else None),
        grader_against_official=_correlation(grader_scores, official),
    )


def _grader_scores(data: EvaluationData, request: LeaderboardRequest) -> dict[str, float]:
    return {s.system: s.score for s in score_systems(data, request) if s.system != OVERALL}


def _with_rank(score: SystemScore, official: dict[str, float] | None) -> SystemScore:
    return replace(score, official_rank=(official or {}).get(score.system))


def _correlation(scores: dict[str, float], reference: dict[str, float] | None) -> Correlation | None:
    """Kendall τ_b, Spearman ρ and τ_AP of ``scores`` against ``reference`` ranks (None without a reference or
    when a reference system has no score)."""
    if not reference:
        return None
    try:
        return rank_correlation(scores, reference)
    except MissingSystemsError:
        return None


# -- rendering: JSON for the CLI, tables for tsv/md/latex, and the agreement page's view model ---------


def _confusion_json(c: Confusion) -> dict[str, int]:
    return {"tp": c.tp, "fp": c.fp, "fn": c.fn, "tn": c.tn}


def pair_json(pair: PairAgreement) -> dict[str, Any]:
    return {
        "first": pair.first,
        "second": pair.second,
        "first_level": pair.first_level,
        "second_level": pair.second_level,
        "n": pair.confusion.n,
        "kappa": nan_to_none(pair.kappa),
        **_confusion_json(pair.confusion),
        "crosstab": {
            "rows": list(pair.crosstab.rows),
            "columns": list(pair.crosstab.columns),
            "counts": [list(r) for r in pair.crosstab.counts],
        },
    }


def external_agreement_json(result: ExternalAgreement) -> dict[str, Any]:
    """``rubric agreement C --against NAME --format json``."""
    return {
        "judge": result.judge.name,
        "n_judgments": result.judge.n_judgments,
        "grader_id": result.grader.id,
        "min_external": result.min_external,
        "min_rating": result.min_rating,
        "min_judgment": result.min_judgment,
        "grader_vs_judge": pair_json(result.grader_vs_judge),
        "judge_vs_manual": pair_json(result.judge_vs_manual),
        "grader_vs_manual": pair_json(result.grader_vs_manual),
    }


def _pairs(result: ExternalAgreement) -> tuple[PairAgreement, ...]:
    return (result.grader_vs_judge, result.judge_vs_manual, result.grader_vs_manual)


def external_agreement_tables(result: ExternalAgreement) -> list[Table]:
    """One κ table (a row per pair), then each pair's cross-tabulation."""
    kappa = Table(
        title=f"Agreement with judge {result.judge.name} ({result.judge.n_judgments} judgments)",
        columns=["predicted", "level", "truth", "level", "n", "kappa", "tp", "fp", "fn", "tn"],
        rows=[
            [
                p.first,
                p.first_level,
                p.second,
                p.second_level,
                p.confusion.n,
                p.kappa,
                *_confusion_json(p.confusion).values(),
            ]
            for p in _pairs(result)
        ],
    )
    crosstabs = [
        Table(
            title=f"{p.first} (rows) × {p.second} (columns)",
            columns=["label", *(str(c) for c in p.crosstab.columns)],
            rows=[[r, *counts] for r, counts in zip(p.crosstab.rows, p.crosstab.counts, strict=True)],
        )
        for p in _pairs(result)
        if p.crosstab.rows
    ]
    return [kappa, *crosstabs]


def _correlation_json(c: Correlation | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {
        "spearman": nan_to_none(c.spearman),
        "kendall": nan_to_none(c.kendall),
        "tau_ap": nan_to_none(c.tau_ap),
        "n_systems": c.n_systems,
    }


def external_comparison_json(result: ExternalComparison) -> dict[str, Any]:
    """``rubric leaderboard C --measure M --judge NAME --format json``: the board on the judge's qrels (the
    ``leaderboard_json`` contract, correlation = against the official ranks), then the other correlations."""
    return {
        **leaderboard_json(result.board),
        "judge": result.judge.name,
        "min_external": result.min_external,
        "grader_scores": result.grader_scores,
        "against_grader": _correlation_json(result.against_grader),
        "grader_against_official": _correlation_json(result.grader_against_official),
    }


def external_comparison_table(result: ExternalComparison) -> Table:
    board = result.board
    footer = [f"judge: {result.judge.name}", f"min_external: {result.min_external}"]
    for name, c in (
        ("vs official", board.correlation),
        ("vs grader", result.against_grader),
        ("grader vs official", result.grader_against_official),
    ):
        if c is not None:
            footer.append(f"{name}\tkendall {_fmt(c.kendall)}\tspearman {_fmt(c.spearman)}\tn_systems {c.n_systems}")
    return Table(
        title=f"Leaderboard on {result.judge.name}'s qrels: {board.measure}",
        columns=["system", board.measure, "stderr", "grader_score", "official_rank", "n_queries"],
        rows=[
            [s.system, s.score, s.stderr, result.grader_scores.get(s.system), s.official_rank, len(s.per_query)]
            for s in board.systems
        ],
        footer=footer,
    )


def _fmt(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.3f}"


@dataclass(frozen=True, slots=True)
class ExternalSection:
    """The agreement page's section on other judges: the imported judges, the chosen one's κ and leaderboard.

    ``chosen`` is None only when no judge is imported (the page then says how to import one).
    """

    judges: tuple[ExternalJudge, ...]
    chosen: ExternalJudge | None
    measure: str
    min_external: int
    agreement: ExternalAgreement | None
    comparison: ExternalComparison | None
    hint: str


def external_section(
    session: Session,
    collection: Collection,
    *,
    grader_id: int,
    judge: str | None,
    min_external: int,
    measure: str,
    min_judgment: int,
) -> ExternalSection:
    """For the page: ``judge`` by name (None: the first imported one), scored with ``measure`` (a trec_eval name).

    The settings are checked before any judge is read, so a bad value is refused whether or not judges exist.
    """
    check_min_external(min_external)
    request = LeaderboardRequest(measure=measure, bootstrap_samples=0, grader_id=grader_id)
    judge_measure(request)
    judges = external_judges(session, collection)
    hint = import_hint(collection)
    if judge is None and not judges:
        return ExternalSection(judges, None, request.measure.name, min_external, None, None, hint)
    chosen = resolve_judge(session, collection, judge) if judge is not None else judges[0]
    agreement = external_agreement(
        session, collection, chosen, grader_id=grader_id, min_external=min_external, min_judgment=min_judgment
    )
    request = replace(request, min_rating=agreement.min_rating)  # the grader's board counts its relevant labels alike
    comparison = external_comparison(session, collection, chosen, request, min_external=min_external)
    return ExternalSection(judges, chosen, request.measure.name, min_external, agreement, comparison, hint)
