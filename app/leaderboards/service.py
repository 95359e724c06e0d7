"""Leaderboards from stored grades: Cover, n-Cover, or trec_eval measures on derived qrels."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import ir_measures
from sqlalchemy.orm import Session

from app.collections import queries, snapshot
from app.collections.graders import resolve_grader
from app.collections.queries import GraderRef
from app.collections.service import official_leaderboard
from app.errors import Invalid, NotFound
from app.evaluation.correlation import QueryCorrelation, per_query_correlation, rank_correlation, scores_to_ranks
from app.evaluation.cover import OVERALL, CoverTable, cover_scores_of, cover_table
from app.evaluation.formatting import Table, nan_to_none, reference_round, trec_eval_round
from app.evaluation.frame import GradeFrame, RankingFrame
from app.evaluation.nuggets import (
    Importances,
    Subset,
    SupportScale,
    nugget_scores_of,
    nugget_table,
    weighted_cover_table,
)
from app.evaluation.qrels import LabelRule, frame_qrels
from app.evaluation.stats import bootstrap_ci
from app.evaluation.trec import per_query_values, scores_of, top_depth
from app.evaluation.types import Correlation, GradedPool, Leaderboard, Qrels, SystemScore
from app.kept import Kept
from app.leaderboards import measures, params, recompute
from app.leaderboards.importance import item_importances
from app.leaderboards.measures import Cover, Measure, NuggetScore, TrecMeasure, WeightedCover
from app.models import Collection
from app.review.flags import flagged_ids
from app.rubrics.service import latest_version, version_by_number


@dataclass(frozen=True, slots=True, init=False)
class LeaderboardRequest:
    """One evaluation, resolved at the boundary: a grader by id, a measure value, bounded settings.

    ``measure`` may be given as text (``"P@20"``): it is parsed into its value (app/leaderboards/
    measures.py) at construction, so every request holds a ``Cover`` or ``TrecMeasure``.
    ``grader_id`` is None only where the caller means the collection's primary grader.
    """

    measure: Measure
    min_rating: int | None
    top_k: int
    label: str
    rubric_version: int | None
    reference_rounding: bool
    bootstrap_samples: int
    bootstrap_seed: int
    include_overrides: bool  # judges' grade overrides replace the grader's ratings
    grader_id: int | None
    exclude_flagged: bool  # items judges flagged as spurious are left out (see load_evaluation_data)

    def __init__(
        self,
        measure: Measure | str,
        min_rating: int | None = None,
        top_k: int = 20,
        label: str = "max",
        rubric_version: int | None = None,
        reference_rounding: bool = False,
        bootstrap_samples: int = 1000,
        bootstrap_seed: int = 42,
        include_overrides: bool = False,
        grader_id: int | None = None,
        exclude_flagged: bool = False,
    ) -> None:
        values = {
            # the name only: check_request bounds min_rating before the level is applied to the measure
            "measure": measures.parse(measure),
            "min_rating": min_rating,
            "top_k": top_k,
            "label": label,
            "rubric_version": rubric_version,
            "reference_rounding": reference_rounding,
            "bootstrap_samples": bootstrap_samples,
            "bootstrap_seed": bootstrap_seed,
            "include_overrides": include_overrides,
            "grader_id": grader_id,
            "exclude_flagged": exclude_flagged,
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @property
    def is_cover(self) -> bool:
        return isinstance(self.measure, Cover)


def check_request(request: LeaderboardRequest) -> LeaderboardRequest:
    """``request`` if every setting is within its bounds (app/leaderboards/params.py), else ``Invalid``."""
    params.check_label(request.label)
    if request.min_rating is not None:
        params.bounded("min_rating", request.min_rating, params.MIN_RATING)
    params.bounded("top_k", request.top_k, params.TOP_K)
    if request.rubric_version is not None:
        params.bounded("version", request.rubric_version, params.VERSION)
    params.bounded("bootstrap_samples", request.bootstrap_samples, params.BOOTSTRAP)
    measures.parse(request.measure, min_rating=request.min_rating)  # the level is part of a trec measure
    return request


@dataclass(frozen=True, slots=True)
class EvaluationData:
    """What a leaderboard reads: one grader's cells and every system's rankings, as frames."""

    grader: GraderRef
    grades: GradeFrame
    ranking: RankingFrame
    pool: queries.PoolKeys
    structure_token: str = ""  # the snapshot's: which pool and rankings these frames are ("" = unknown)
    # what ``keyed_grades`` is a function of (snapshot, revision, grader, digests of the filters),
    # naming the results kept from it; read through ``grades_key``
    content_key: tuple[object, ...] | None = None
    keyed_grades: GradeFrame | None = None
    # item id → importance, read only for the measures that weigh items (nugget scores, cover-weighted)
    importances: Importances = field(default_factory=dict)

    @property
    def grades_key(self) -> tuple[object, ...] | None:
        """The name of ``grades``' content, or None when unknown.

        The key names the frame it was made for, not whatever ``grades`` holds now: ``replace(data,
        grades=…)`` (an analysis that prunes an item) keeps the old key and frame, and must never
        find the results kept for the unpruned grades.
        """
        return self.content_key if self.keyed_grades is self.grades else None

    @property
    def graded(self) -> GradedPool:
        """The grades in dict form (query → passage → PassageGrade), for the per-passage views."""
        return self.grades.to_graded()


def load_evaluation_data(
    session: Session,
    collection: Collection,
    *,
    grader_id: int | None = None,
    rubric_version: int | None = None,
    include_overrides: bool = False,
    exclude_flagged: bool = False,
    model: str | None = None,
    prompt_class: str | None = None,
) -> EvaluationData:
    """Everything a leaderboard needs, from the collection's in-memory snapshot (app/collections/snapshot.py).

    ``grader_id`` is the grader, resolved at the boundary (app/collections/graders.py:resolve_grader);
    None means the collection's primary grader. ``model``/``prompt_class`` are a transitional
    spelling of the same resolution for callers not yet migrated: they must name exactly one grader.

    ``exclude_flagged`` drops the items judges flagged as spurious (app/review/flags.py) from the
    grades, exactly as the rubric-version filter drops items a version does not hold: every
    measure then sees the collection as if those items had never been in the bank. It is a toggle
    of the evaluation, not a new rubric version, because a flag is one judge's opinion, reversible
    by unflagging; publishing a version without the item is the organiser's lasting decision.
    """
    current = snapshot.current(session, collection)
    if grader_id is None:
        grader_id = resolve_grader(session, collection, model=model, prompt_class=prompt_class).id
    grader = _grader_by_id(current.grader_list(), grader_id)
    grades, revision = current.grades_at(session, grader.id)
    # each filter's content, digested: a rubric edit, a flag or an override moves no revision
    filters: list[tuple[str, str]] = []
    if rubric_version is not None:
        version = version_by_number(session, collection, rubric_version)
        allowed = queries.version_item_ids(session, version)
        if not allowed.issuperset(item for item in grades.items if item):  # else nothing to drop: spare the copy
            grades = grades.restrict_items(allowed)
        filters.append(("version", _digest(sorted(allowed))))
    if exclude_flagged:
        flagged = flagged_ids(session, collection)
        if flagged:
            grades = grades.restrict_items(frozenset(grades.items) - flagged)
        filters.append(("flagged", _digest(sorted(flagged))))
    if include_overrides:
        position = current.structure.position
        overrides = queries.load_overrides(session, current.structure.pool)
        by_cell = {
            (position[entry], item): rating
            for entry, by_item in overrides.items()
            if entry in position  # an entry imported after the snapshot was built: it has no grades there
            for item, rating in by_item.items()
        }
        grades = grades.with_overrides(by_cell)
        filters.append(("overrides", _digest(sorted(by_cell.items()))))
    structure = current.structure
    key = (snapshot.database_key(session), collection.id, structure.token, revision, grader.id, tuple(filters))
    return EvaluationData(grader, grades, structure.rankings, structure.pool, structure.token, key, grades)


def _digest(values: list[Any]) -> str:
    return hashlib.blake2b(repr(values).encode(), digest_size=20).hexdigest()


def default_version(session: Session, collection: Collection, grader: GraderRef) -> int | None:
    """The rubric version a page shows when none is chosen: the newest published one for a rubric grader."""
    if grader.prompt_type == "direct_grading":
        return None
    latest = latest_version(session, collection)
    return latest.number if latest else None


def qrels_for(data: EvaluationData, request: LeaderboardRequest) -> Qrels:
    return frame_qrels(data.grades, LabelRule.parse(request.label, min_rating=request.min_rating))


def score_systems(data: EvaluationData, request: LeaderboardRequest) -> list[SystemScore]:
    """Raw per-system scores (no rounding, no CI) for the requested measure."""
    if isinstance(request.measure, Cover):
        return cover_scores_of(_cover_table(data, request), normalized=request.measure.normalized)
    if isinstance(request.measure, WeightedCover):
        weighted = weighted_cover_table(
            data.grades, data.ranking, data.importances, min_rating=request.min_rating, top_k=request.top_k
        )
        return cover_scores_of(weighted, normalized=request.measure.normalized)
    if isinstance(request.measure, NuggetScore):
        nugget = request.measure
        per_query = nugget_table(
            data.grades,
            data.ranking,
            data.importances,
            subset=Subset(nugget.subset),
            strict=nugget.strict,
            scale=SupportScale(nugget.support, nugget.partial),
            top_k=request.top_k,
        )
        return nugget_scores_of(per_query)
    return scores_of(trec_values_for(data, request))


MAX_COVER_CACHED = 8  # per-process Cover tables (grades × threshold × depth); about 3 MB each at 5× DL
_cover_tables: Kept[tuple[object, ...], CoverTable] = Kept(MAX_COVER_CACHED)


def _cover_table(data: EvaluationData, request: LeaderboardRequest) -> CoverTable:
    """``cover_table`` of the request, kept per grades (``grades_key``), threshold and depth.

    Every open board re-fetches its fragment after each event, and the page, the fragment and the
    exports show one table: about 55 ms at 5× DL, computed once per revision instead. The rankings
    are the structure token's, in the key. The caller gets its own dicts: the kept ones stay as computed.
    """

    def compute() -> CoverTable:
        return cover_table(data.grades, data.ranking, min_rating=request.min_rating, top_k=request.top_k)

    if data.grades_key is None:
        return compute()
    table = _cover_tables.get_or_compute((data.grades_key, request.min_rating, request.top_k), compute)
    return {system: (dict(exam), dict(n_exam)) for system, (exam, n_exam) in table.items()}


def trec_values_for(data: EvaluationData, request: LeaderboardRequest) -> dict[str, dict[str, float]]:
    """system → query → value of the request's trec measure; only queries whose labels changed are re-run."""
    assert isinstance(request.measure, TrecMeasure)
    rule = LabelRule.parse(request.label, min_rating=request.min_rating)
    return recompute.trec_values(
        data.grades,
        data.ranking,
        rule,
        request.measure.at(request.min_rating),
        _lineage(data, request),
        content=data.grades_key,
    )


def _lineage(data: EvaluationData, request: LeaderboardRequest) -> tuple[object, ...] | None:
    """What a kept evaluation is named by: collection structure, grader and the grade filters (None: keep none).

    The reuse is exact whatever the key (labels are compared entry by entry, rankings by identity);
    the key keeps two graders' or two versions' boards from replacing each other's values.
    """
    if not data.structure_token:
        return None
    return (
        data.pool.collection_id,
        data.structure_token,
        data.grader.id,
        request.rubric_version,
        request.include_overrides,
        request.exclude_flagged,
    )


def _correlation_score(score: SystemScore, request: LeaderboardRequest) -> float:
    # The reference correlates the 4-decimal values trec_eval printed, not the exact means.
    is_trec = isinstance(request.measure, TrecMeasure)
    return trec_eval_round(score.score) if request.reference_rounding and is_trec else score.score


def _display_score(score: SystemScore, request: LeaderboardRequest) -> float:
    if not request.reference_rounding:
        return score.score
    if not isinstance(request.measure, TrecMeasure):  # Cover's 3 decimals for every non-trec measure
        return round(score.score, 3)
    return reference_round(score.score)


def build_leaderboard(
    data: EvaluationData, request: LeaderboardRequest, official: dict[str, float] | None
) -> Leaderboard:
    """Score, attach CIs and official ranks, sort, and correlate with the official leaderboard."""
    raw = score_systems(data, request)
    correlation: Correlation | None = None
    if official:
        correlation = rank_correlation({s.system: _correlation_score(s, request) for s in raw}, official)
    systems = []
    for score in raw:
        low: float | None = None
        high: float | None = None
        if request.bootstrap_samples > 0:
            low, high = bootstrap_ci(
                list(score.per_query.values()), samples=request.bootstrap_samples, seed=request.bootstrap_seed
            )
        systems.append(
            replace(
                score,
                score=_display_score(score, request),
                ci_low=low,
                ci_high=high,
                official_rank=(official or {}).get(score.system),
            )
        )
    systems.sort(key=lambda s: (s.system != OVERALL, -s.score, s.system))
    return Leaderboard(
        measure=request.measure.name,
        systems=systems,
        correlation=correlation,
        settings={
            "min_rating": request.min_rating,
            "top_k": request.top_k,
            "label": request.label,
            "grader": queries.describe_grader(data.grader),
            "rubric_version": request.rubric_version,
            "reference_rounding": request.reference_rounding,
            "bootstrap_samples": request.bootstrap_samples,
            "include_overrides": request.include_overrides,
            "exclude_flagged": request.exclude_flagged,
        },
    )


def evaluation_data(session: Session, collection: Collection, request: LeaderboardRequest) -> EvaluationData:
    """The grades, rankings and pool that ``request`` selects (grader, rubric version, overrides).

    The items' importances are read only for a measure that weighs items, from the requested
    rubric version (else the newest published one).
    """
    data = load_evaluation_data(
        session,
        collection,
        rubric_version=request.rubric_version,
        include_overrides=request.include_overrides,
        exclude_flagged=request.exclude_flagged,
        grader_id=request.grader_id,
    )
    if isinstance(request.measure, NuggetScore | WeightedCover):
        data = replace(data, importances=item_importances(session, collection, request.rubric_version))
    return data


def _grader_by_id(graders: list[GraderRef], grader_id: int) -> GraderRef:
    for grader in graders:
        if grader.id == grader_id:
            return grader
    raise NotFound(f"no grader {grader_id} in this collection")


def compute_leaderboard(
    session: Session, collection: Collection, request: LeaderboardRequest, official: dict[str, float] | None = None
) -> Leaderboard:
    """The leaderboard of one collection; ``official`` defaults to the imported official ranks."""
    data = evaluation_data(session, collection, request)
    if official is None:
        official = official_leaderboard(session, collection) or None
    return build_leaderboard(data, request, official)


@dataclass(frozen=True, slots=True)
class PerQueryCorrelation:
    """Per-query correlations and the two relevance levels they were computed at.

    ``min_rating`` is the derived qrels' level (the grade threshold; trec_eval's default 1 when
    unset), ``min_judgment`` the manual judgments' own level: the two scales differ (self-ratings
    0..5, judgments −2..3), so one threshold for both would make every manual score 0 at τ ≥ 4.
    """

    min_rating: int
    min_judgment: int
    queries: dict[str, QueryCorrelation]


def manual_per_query_correlation(
    session: Session,
    collection: Collection,
    data: EvaluationData,
    request: LeaderboardRequest,
    *,
    min_judgment: int = params.DEFAULT_MANUAL_LEVEL,
    predicted: Mapping[str, Mapping[str, float]] | None = None,
) -> PerQueryCorrelation:
    """Per query: systems ordered by the measure on derived qrels vs on the manual judgments.

    ``predicted`` (system → query → value on the derived qrels) is what ``score_systems`` already
    computed for the same request, when the caller has it: the same trec evaluation is not run twice.
    The judgments are the snapshot's (``snapshot.manual_judgments``), read again only after a
    judgment write replaced the collection's judgments token.
    """
    params.bounded("min_judgment", min_judgment, params.MANUAL_LEVEL)
    if not isinstance(request.measure, TrecMeasure):
        raise Invalid(f"per-query correlation needs a trec_eval measure, not {request.measure}")
    manual_judgments = snapshot.manual_judgments(session, collection)
    measure = request.measure.at(request.min_rating)
    if predicted is None:
        predicted = trec_values_for(data, request)
    inputs = _CorrelationInputs(manual_judgments.token, {system: dict(values) for system, values in predicted.items()})
    key = _correlation_key(data, request, min_judgment)
    kept = _kept_correlation(key, inputs)
    if kept is not None:
        return kept
    manual: Qrels = {q: {p: max(js) for p, js in docs.items()} for q, docs in manual_judgments.by_query.items()}
    runs = data.ranking.runs(top_depth(measure))
    reference = _manual_values(data, manual_judgments.token, manual, request.measure.at(min_judgment), runs)
    result = PerQueryCorrelation(
        min_rating=1 if request.min_rating is None else request.min_rating,
        min_judgment=min_judgment,
        queries=per_query_correlation(predicted, reference),
    )
    if key is not None:
        _correlations.put(key, (inputs, result))
    return result


@dataclass(frozen=True, slots=True)
class _CorrelationInputs:
    """What a per-query correlation is a function of, beyond its key: compared by value on every reuse."""

    judgments_token: str  # which judgments (the snapshot's structure and judgments tokens)
    predicted: dict[str, dict[str, float]]  # system → query → value on the derived qrels


MAX_CORRELATIONS_CACHED = 16  # per-process per-query correlations (structure × measure × levels)
_correlations: Kept[tuple[object, ...], tuple[_CorrelationInputs, PerQueryCorrelation]] = Kept(MAX_CORRELATIONS_CACHED)


def _correlation_key(data: EvaluationData, request: LeaderboardRequest, min_judgment: int) -> tuple[object, ...] | None:
    """The per-query correlation's name: the rankings (structure token), the measure and both levels.

    The grader, its filters and the revision are not in it: they act only through the derived
    values, which ``_CorrelationInputs`` compares by value, with the judgments' token. None when the
    structure is unknown.
    """
    if not data.structure_token:
        return None
    return (data.pool.collection_id, data.structure_token, str(request.measure), request.min_rating, min_judgment)


def _kept_correlation(key: tuple[object, ...] | None, inputs: _CorrelationInputs) -> PerQueryCorrelation | None:
    """The kept correlation of ``key`` if it was computed from equal inputs, else None.

    Comparing the derived values costs milliseconds; the 270 queries' three coefficients cost
    about a second at 5× (issue 16), on every leaderboard fragment.
    """
    kept = None if key is None else _correlations.get(key)
    if kept is None:
        return None
    kept_inputs, result = kept
    return result if kept_inputs == inputs else None


MAX_MANUAL_CACHED = 16  # per-process manual per-query tables (collection structure × judgments × measure)
_manual_tables: Kept[tuple[int, str, str, str], dict[str, dict[str, float]]] = Kept(MAX_MANUAL_CACHED)


def _manual_values(
    data: EvaluationData, judgments_token: str, manual: Qrels, measure: ir_measures.Measure, runs: Any
) -> dict[str, dict[str, float]]:
    """``per_query_values`` of the manual qrels, kept per rankings, judgments and measure.

    ``judgments_token`` names the judgments ``manual`` was derived from, the structure token the
    rankings ``runs`` come from. The manual side does not depend on the grader, so every grader
    and threshold of a collection shares one evaluation.
    """
    if not data.structure_token:
        return per_query_values(manual, runs, measure)
    key = (data.pool.collection_id, data.structure_token, judgments_token, str(measure))
    return _manual_tables.get_or_compute(key, lambda: per_query_values(manual, runs, measure))


def clear() -> None:
    """Forget every kept manual table, per-query correlation and kept evaluation (a test's copy reuses tokens)."""
    _manual_tables.clear()
    _correlations.clear()
    _cover_tables.clear()
    recompute.clear()


def predicted_ranks(board: Leaderboard) -> dict[str, float]:
    """Each system's rank on ``board`` (best = 1, ties share their mean rank), the overall row left out."""
    return scores_to_ranks({s.system: s.score for s in board.systems if s.system != OVERALL})


def _json_number(value: float | None) -> float | None:
    return None if value is None else nan_to_none(value)


def leaderboard_json(board: Leaderboard, per_query: PerQueryCorrelation | None = None) -> dict[str, Any]:
    """The ``--format json`` contract of ``rubric leaderboard`` and of the web's ``leaderboard.json``."""
    result: dict[str, Any] = {
        "measure": board.measure,
        "settings": board.settings,
        "systems": [
            {
                "system": s.system,
                "score": s.score,
                "stderr": s.stderr,
                "ci_low": s.ci_low,
                "ci_high": s.ci_high,
                "official_rank": s.official_rank,
                "per_query": dict(s.per_query),
            }
            for s in board.systems
        ],
        "correlation": _correlation_json(board.correlation),
        "predicted_ranks": predicted_ranks(board),  # system → rank on this board, what the web's rank scatter plots
    }
    if per_query is not None:
        result["per_query_levels"] = {"min_rating": per_query.min_rating, "min_judgment": per_query.min_judgment}
        result["per_query_correlation"] = {q: _query_json(c) for q, c in per_query.queries.items()}
    return result


def _query_json(query: QueryCorrelation) -> dict[str, Any]:
    """A query's correlation with ``reason`` (a code, None when defined) and ``reason_text``."""
    return {
        **(_correlation_json(query.correlation) or {}),
        "reason": None if query.reason is None else query.reason.value,
        "reason_text": None if query.reason is None else query.reason.text,
    }


def _correlation_json(correlation: Correlation | None) -> dict[str, Any] | None:
    if correlation is None:
        return None
    return {
        "spearman": _json_number(correlation.spearman),
        "kendall": _json_number(correlation.kendall),
        "tau_ap": _json_number(correlation.tau_ap),
        "n_systems": correlation.n_systems,
    }


def leaderboard_table(board: Leaderboard) -> Table:
    """The leaderboard as a table: score ± stderr, 95 % bootstrap CI, official rank; correlations as footer."""
    rows: list[list[Any]] = [
        [s.system, s.score, s.stderr, s.ci_low, s.ci_high, s.official_rank, len(s.per_query)] for s in board.systems
    ]
    footer = [f"{key}: {_setting_text(key, value)}" for key, value in board.settings.items()]
    if board.correlation is not None:
        c = board.correlation
        footer += [
            f"spearman\t{_fmt(c.spearman)}",
            f"kendall\t{_fmt(c.kendall)}",
            f"tau_ap\t{_fmt(c.tau_ap)}",
            f"n_systems\t{c.n_systems}",
        ]
    return Table(
        title=f"Leaderboard: {board.measure}",
        columns=["system", board.measure, "stderr", "ci_low", "ci_high", "official_rank", "n_queries"],
        rows=rows,
        footer=footer,
    )


# What an unset setting means, in words: a bare "None" in a footer reads as a missing value.
UNSET_SETTINGS = {"min_rating": "none (any answered item counts, as the reference does)", "rubric_version": "all"}


def _setting_text(key: str, value: Any) -> str:
    return UNSET_SETTINGS.get(key, "none") if value is None else str(value)


def _fmt(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.3f}"
