"""Leaderboard (live), version/grader comparison, exports, agreement dashboard, oversight views, SSE."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse, Response
from scipy.stats import kendalltau
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.agreement.service import as_table, build_agreement_tables
from app.collections import queries
from app.collections.graders import GraderCoverage, grader_coverage, pick, primary_coverage
from app.collections.queries import GraderRef, GraderSelectionError
from app.collections.service import official_leaderboard
from app.db import session_scope
from app.evaluation.agreement import Confusion
from app.evaluation.correlation import MissingSystemsError, rank_correlation, scores_to_ranks
from app.evaluation.cover import OVERALL
from app.evaluation.formatting import render_tables
from app.evaluation.types import PassageGrade
from app.events import open_event_stream
from app.leaderboards import params as bounds
from app.leaderboards.params import bounded_int
from app.leaderboards.service import (
    COVER_MEASURES,
    EvaluationData,
    LeaderboardRequest,
    build_leaderboard,
    check_request,
    compute_leaderboard,
    evaluation_data,
    leaderboard_json,
    leaderboard_table,
    load_evaluation_data,
    manual_per_query_correlation,
    qrels_for,
    score_systems,
)
from app.models import Collection, RubricVersion
from app.oversight import service as oversight_pages
from app.oversight.service import bad_questions_table, uncovered_table, verify_grading_table
from app.rubrics.service import latest_version
from app.web import charts, grader_view
from app.web.deps import CurrentUser, db, db_slot, is_htmx, optional_user, render, require
from app.web.routes.collections import get_or_404
from app.web.security import content_disposition

router = APIRouter()
MEASURES = ("cover", "n-cover", "P@20", "NDCG@10", "MAP", "RR", "R-prec", "Recall@100")


def _graders(session: Session, collection: Collection) -> list[GraderCoverage]:
    """The collection's graders with their coverage (one GROUP BY over the collection's grades)."""
    return grader_coverage(session, collection)


def _grader(session: Session, collection: Collection, grader_id: int | None) -> GraderRef:
    """The grader by id (the picker), else the collection's primary grader: never the last job's by accident."""
    coverage = _graders(session, collection)
    if not coverage:
        raise HTTPException(404, "nothing is graded yet: launch a grading job first")
    if grader_id is None:
        primary = primary_coverage(session, collection, coverage)
        assert primary is not None  # coverage is not empty
        return primary.grader
    return pick(coverage, grader_id).grader


def _request(session: Session, collection: Collection, params: dict[str, Any]) -> tuple[LeaderboardRequest, GraderRef]:
    grader_id = bounded_int(params, "grader", bounds.ID)
    version = bounded_int(params, "version", bounds.VERSION)
    min_rating = bounded_int(params, "min_rating", bounds.MIN_RATING, 4)
    top_k = bounded_int(params, "top_k", bounds.TOP_K, 20) or 20
    grader = _grader(session, collection, grader_id)
    if version is None and grader.prompt_type != "direct_grading":
        latest = latest_version(session, collection)
        version = latest.number if latest else None
    request = LeaderboardRequest(
        measure=str(params.get("measure") or "cover"),
        min_rating=min_rating,
        top_k=top_k,
        label=str(params.get("label") or "max"),
        model=grader.model,
        prompt_class=grader.prompt_class,
        grader_id=grader.id,
        rubric_version=version,
        include_overrides=params.get("overrides") in ("1", "on", "true"),
        bootstrap_samples=1000,
    )
    return check_request(request), grader


def board_view(session: Session, collection: Collection, params: dict[str, Any]) -> dict[str, Any]:
    request, grader = _request(session, collection, params)
    data = evaluation_data(session, collection, request)
    try:
        board = build_leaderboard(data, request, official_leaderboard(session, collection) or None)
    except (MissingSystemsError, ValueError) as error:
        raise HTTPException(400, str(error)) from None
    systems = [s for s in board.systems if s.system != OVERALL]
    predicted = scores_to_ranks({s.system: s.score for s in systems})
    points = [(s.system, predicted[s.system], s.official_rank) for s in systems if s.official_rank is not None]
    return {
        "request": request,
        "grader": {"id": grader.id, "label": f"{grader.model} / {grader.prompt_class}"},
        # the exports compute what this page shows: the grader it resolved, by id, whatever the URL omitted
        "export_params": {**params, "grader": grader.id},
        "systems": [
            {
                "name": s.system,
                "score": s.score,
                "stderr": s.stderr,
                "ci_low": s.ci_low,
                "ci_high": s.ci_high,
                "official": s.official_rank,
                "predicted": predicted.get(s.system),
            }
            for s in board.systems
        ],
        "correlation": board.correlation,
        "per_query": _per_query_rows(
            session,
            collection,
            data,
            request,
            bounded_int(params, "min_judgment", bounds.MANUAL_LEVEL, bounds.DEFAULT_MANUAL_LEVEL),
        ),
        "errorbars": charts.error_bars([(s.system, s.score, s.ci_low, s.ci_high) for s in systems]),
        "scatter": charts.rank_scatter(points),
    }


def _per_query_rows(
    session: Session,
    collection: Collection,
    data: EvaluationData,
    request: LeaderboardRequest,
    min_judgment: int | None,
) -> dict[str, Any] | None:
    """Per query: the systems ordered by the measure on derived qrels vs on the manual judgments.

    Defined for trec_eval measures (Cover has no manual counterpart); None otherwise. The manual
    side uses its own relevance level ``min_judgment``; an undefined query shows why.
    """
    if request.measure.lower() in COVER_MEASURES:
        return None
    result = manual_per_query_correlation(
        session, collection, data, request, min_judgment=min_judgment or bounds.DEFAULT_MANUAL_LEVEL
    )
    rows = [
        {
            "query": q,
            "spearman": c.correlation.spearman,
            "kendall": c.correlation.kendall,
            "n": c.correlation.n_systems,
            "reason": None if c.reason is None else c.reason.text,
        }
        for q, c in sorted(result.queries.items())
    ]
    return {"min_rating": result.min_rating, "min_judgment": result.min_judgment, "rows": rows}


def _choices(session: Session, collection: Collection, chosen: int | None = None) -> dict[str, Any]:
    """The pickers' options: graders with their coverage (app/web/grader_view.py), versions, measures.

    ``grader_view`` is the chosen grader's option (default: the primary one), with a warning when partial.
    """
    graders, picked = grader_view.choices(session, collection, chosen)
    versions = session.scalars(
        select(RubricVersion.number)
        .where(RubricVersion.collection_id == collection.id, RubricVersion.status == "published")
        .order_by(RubricVersion.number.desc())
    )
    return {
        "graders": graders,
        "grader_view": picked,
        "versions": list(versions),
        "measures": MEASURES,
    }


@router.get("/c/{name}/leaderboard", name="leaderboard_page")
def leaderboard_page(
    name: str, request: Request, user: CurrentUser = Depends(require("viewer")), session: Session = db
) -> Response:
    collection = get_or_404(session, name)
    params = dict(request.query_params)
    board = board_view(session, collection, params)
    context = {
        "user": user,
        "collection": name,
        "params": params,
        "board": board,
        **_choices(session, collection, board["grader"]["id"]),
    }
    return render(request, "leaderboard.html", context, block="board" if is_htmx(request) else None)


@router.get("/c/{name}/leaderboard.{fmt}", name="leaderboard_export")
def leaderboard_export(
    name: str,
    fmt: str,
    request: Request,
    user: CurrentUser = Depends(require("viewer")),
    session: Session = db,
) -> Response:
    collection = get_or_404(session, name)
    lb_request, grader = _request(session, collection, dict(request.query_params))
    board = compute_leaderboard(session, collection, lb_request)
    headers = {"X-Grader-Id": str(grader.id)}  # the body's settings name it too (model, prompt class, template)
    if fmt == "json":
        return Response(json.dumps(leaderboard_json(board), indent=1), media_type="application/json", headers=headers)
    formats = {"tsv": "tsv", "tex": "latex", "md": "md"}
    if fmt not in formats:
        raise HTTPException(404, "export as .tsv, .json, .tex or .md")
    table = render_tables([leaderboard_table(board)], formats[fmt])  # type: ignore[arg-type]
    return PlainTextResponse(table, headers=headers)


@router.get("/c/{name}/qrels", name="qrels_export")
def qrels_export(
    name: str, request: Request, user: CurrentUser = Depends(require("viewer")), session: Session = db
) -> Response:
    collection = get_or_404(session, name)
    lb_request, grader = _request(session, collection, dict(request.query_params))
    data = evaluation_data(session, collection, lb_request)
    qrels = qrels_for(data, lb_request)
    lines = [f"{q} 0 {p} {label}\n" for q, docs in sorted(qrels.items()) for p, label in sorted(docs.items())]
    headers = {"Content-Disposition": content_disposition(f"{name}.qrels"), "X-Grader-Id": str(grader.id)}
    return PlainTextResponse("".join(lines), headers=headers)


@router.get("/c/{name}/compare", name="compare_page")
def compare_page(
    name: str, request: Request, user: CurrentUser = Depends(require("viewer")), session: Session = db
) -> Response:
    """Two leaderboards (rubric versions or graders) side by side: rank changes and Kendall τ between them."""
    params = dict(request.query_params)
    for key, limits in (("a_version", bounds.VERSION), ("b_version", bounds.VERSION)):
        bounded_int(params, key, limits)
    for key in ("a_grader", "b_grader"):
        bounded_int(params, key, bounds.ID)
    collection = get_or_404(session, name)
    left = board_view(
        session, collection, {**params, "version": params.get("a_version"), "grader": params.get("a_grader")}
    )
    right = board_view(
        session, collection, {**params, "version": params.get("b_version"), "grader": params.get("b_grader")}
    )
    a = {s["name"]: s for s in left["systems"] if s["name"] != OVERALL}
    b = {s["name"]: s for s in right["systems"] if s["name"] != OVERALL}
    common = sorted(set(a) & set(b))
    tau = (
        kendalltau([a[s]["score"] for s in common], [b[s]["score"] for s in common]).statistic
        if len(common) > 1
        else None
    )
    rows = sorted(
        (
            {
                "name": s,
                "a": a[s]["score"],
                "b": b[s]["score"],
                "rank_a": a[s]["predicted"],
                "rank_b": b[s]["predicted"],
                "moved": (a[s]["predicted"] or 0) - (b[s]["predicted"] or 0),
            }
            for s in common
        ),
        key=lambda r: r["rank_b"] or 0,
    )
    return render(
        request,
        "compare.html",
        {
            "user": user,
            "collection": name,
            "rows": rows,
            "tau": tau,
            "left": left,
            "right": right,
            "params": params,
            **_choices(session, collection),
        },
    )


# ---- agreement ------------------------------------------------------------------------------


def _kappa(pairs: list[tuple[bool, bool]]) -> tuple[float, Confusion]:
    tp = sum(1 for p, r in pairs if p and r)
    fp = sum(1 for p, r in pairs if p and not r)
    fn = sum(1 for p, r in pairs if not p and r)
    stats = Confusion(tp, fp, fn, len(pairs) - tp - fp - fn)
    return stats.kappa(), stats


def agreement_view(
    session: Session,
    collection: Collection,
    grader: GraderRef,
    min_answers: int,
    min_judgment: int,
    official: dict[str, float],
) -> dict[str, Any]:
    data = load_evaluation_data(session, collection, model=None, prompt_class=None, grader_id=grader.id)
    graded, pool = data.graded, data.pool
    judgments = queries.load_judgments(session, pool)
    tables = build_agreement_tables(graded, judgments, grader.is_self_rated, [min_answers], min_judgment)
    judged = [(q, p, max(js)) for q, docs in judgments.items() for p, js in docs.items() if js]
    sweep = []
    for tau in range(1, 6):
        pairs = [(_max(graded, q, p) >= tau, rel >= min_judgment) for q, p, rel in judged if p in graded.get(q, {})]
        kappa, _ = _kappa(pairs)
        sweep.append({"tau": tau, "kappa": kappa, "kendall": _leaderboard_tau(data, tau, official)})
    return {
        "tables": [_table_view(as_table(t), t) for t in tables],
        "sweep": sweep,
        "per_item": _per_item(graded, judgments, min_judgment),
        "overrides": _override_agreement(session, pool, graded),
    }


def _max(graded: Any, query_id: str, passage_id: str) -> int:
    grade: PassageGrade = graded[query_id][passage_id]
    return max(grade.ratings.values(), default=0)


def _leaderboard_tau(data: EvaluationData, tau: int, official: dict[str, float]) -> float | None:
    """Kendall τ of the Cover leaderboard at threshold ``tau`` against the official one."""
    if not official:
        return None
    scores = score_systems(data, LeaderboardRequest(measure="cover", min_rating=tau, bootstrap_samples=0))
    try:
        return rank_correlation({s.system: s.score for s in scores if s.system != OVERALL}, official).kendall
    except MissingSystemsError:
        return None


def _per_item(graded: Any, judgments: Any, min_judgment: int, tau: int = 4) -> list[dict[str, Any]]:
    """For each item, κ of "rated ≥ 4" against "judged relevant" over its query's judged passages."""
    result = []
    for query_id, docs in graded.items():
        items = sorted({i for grade in docs.values() for i in grade.ratings})
        for item_id in items:
            pairs = [
                (docs[p].ratings.get(item_id, 0) >= tau, max(js) >= min_judgment)
                for p, js in judgments.get(query_id, {}).items()
                if p in docs and js
            ]
            kappa, stats = _kappa(pairs)
            result.append(
                {
                    "query": query_id,
                    "item_id": item_id,
                    "kappa": kappa,
                    "tp": stats.tp,
                    "fp": stats.fp,
                    "fn": stats.fn,
                    "tn": stats.tn,
                }
            )
    return sorted(result, key=lambda r: r["kappa"])


def _override_agreement(session: Session, pool: queries.PoolKeys, graded: Any) -> dict[str, Any] | None:
    overrides = queries.load_overrides(session, pool)
    pairs = []
    for entry_pk, by_item in overrides.items():
        query_id, passage_id = pool.keys[entry_pk]
        grade = graded.get(query_id, {}).get(passage_id)
        for item_id, human in by_item.items():
            if grade is not None and item_id in grade.ratings:
                pairs.append((human, grade.ratings[item_id]))
    if not pairs:
        return None
    kappa, stats = _kappa([(llm >= 4, human >= 4) for human, llm in pairs])
    return {"n": len(pairs), "exact": sum(1 for h, g in pairs if h == g) / len(pairs), "kappa": kappa, "stats": stats}


def _table_view(table: Any, raw: Any) -> dict[str, Any]:
    peak = max((c for row in raw.counts for c in row), default=1) or 1
    return {
        "title": table.title,
        "columns": table.columns,
        "rows": table.rows,
        "heat": [[c / peak for c in row] for row in raw.counts],
        "n_counts": len(raw.columns),
    }


@router.get("/c/{name}/agreement", name="agreement_page")
def agreement_page(
    name: str,
    request: Request,
    min_answers: int = Query(1, ge=bounds.MIN_ANSWERS[0], le=bounds.MIN_ANSWERS[1]),
    min_judgment: int = Query(2, ge=bounds.MIN_JUDGMENT_RANGE[0], le=bounds.MIN_JUDGMENT_RANGE[1]),
    grader: int | None = Query(None, ge=bounds.ID[0], le=bounds.ID[1]),
    user: CurrentUser = Depends(require("viewer")),
    session: Session = db,
) -> Response:
    collection = get_or_404(session, name)
    chosen = _grader(session, collection, grader)
    try:
        view = agreement_view(
            session, collection, chosen, min_answers, min_judgment, official_leaderboard(session, collection)
        )
    except GraderSelectionError as error:
        raise HTTPException(400, str(error)) from None
    return render(
        request,
        "agreement.html",
        {
            "user": user,
            "collection": name,
            "view": view,
            "min_answers": min_answers,
            "min_judgment": min_judgment,
            "grader": chosen.id,
            **_choices(session, collection, chosen.id),
        },
    )


# ---- oversight ------------------------------------------------------------------------------


def _page_params(min_rating: int, min_judgment: int, grader: int, filters: oversight_pages.RowFilter) -> dict[str, Any]:
    """The query parameters a next / previous page link keeps (the empty filters left out)."""
    kept = {"min_rating": min_rating, "min_judgment": min_judgment, "grader": grader}
    chosen = {"query": filters.query, "item": filters.item, "grade": filters.grade}
    return kept | {key: value for key, value in chosen.items() if value is not None}


@router.get("/c/{name}/oversight/{view}", name="oversight_page")
def oversight_page(
    name: str,
    view: str,
    request: Request,
    min_rating: int = Query(4, ge=bounds.MIN_RATING[0], le=bounds.MIN_RATING[1]),
    min_judgment: int = Query(2, ge=bounds.MIN_JUDGMENT_RANGE[0], le=bounds.MIN_JUDGMENT_RANGE[1]),
    grader: int | None = Query(None, ge=bounds.ID[0], le=bounds.ID[1]),
    page: int = Query(1, ge=1, le=oversight_pages.MAX_PAGE),
    query: str | None = Query(None, max_length=oversight_pages.FILTER_CHARS),
    item: str | None = Query(None, max_length=oversight_pages.FILTER_CHARS),
    grade: str | None = Query(None, max_length=20),
    user: CurrentUser = Depends(require("viewer")),
    session: Session = db,
) -> Response:
    """One page (at most PER_PAGE rows) of an oversight table, filtered by query, item and grade server-side."""
    collection = get_or_404(session, name)
    chosen = _grader(session, collection, grader)
    model, prompt_class = chosen.model, chosen.prompt_class
    filters = oversight_pages.RowFilter(
        query or None, item or None, bounded_int({"grade": grade}, "grade", oversight_pages.GRADE)
    )
    if view == "bad":
        table = bad_questions_table(
            session,
            collection,
            model=model,
            prompt_class=prompt_class,
            grader_id=chosen.id,
            min_judgment=min_judgment,
            min_rating=min_rating,
        )
    elif view == "uncovered":
        table = uncovered_table(
            session,
            collection,
            model=model,
            prompt_class=prompt_class,
            grader_id=chosen.id,
            min_judgment=min_judgment,
            min_rating=min_rating,
        )
    elif view == "verify":
        table = verify_grading_table(
            session, collection, model=model, prompt_class=prompt_class, grader_id=chosen.id, query_id=filters.query
        )
    elif view == "impact":
        table = oversight_pages.impact_table(
            session,
            collection,
            model=None,
            prompt_class=None,
            grader_id=chosen.id,
            min_rating=min_rating,
            query_id=filters.query,
        )
    else:
        raise HTTPException(404, "views: bad, uncovered, verify, impact")
    shown = oversight_pages.page_of(table, filters, page)
    return render(
        request,
        "oversight.html",
        {
            "user": user,
            "collection": name,
            "view": view,
            "table": shown,
            "filters": filters,
            "page_params": _page_params(min_rating, min_judgment, chosen.id, filters),
            "min_rating": min_rating,
            "min_judgment": min_judgment,
            "grader": chosen.id,
            **_choices(session, collection, chosen.id),
        },
    )


# ---- live events ----------------------------------------------------------------------------


@router.get("/c/{name}/events", name="events")
async def events(name: str, request: Request) -> Response:
    """Server-Sent Events: ``job`` progress and ``leaderboard`` updates of this collection.

    The viewer check and the collection are resolved before streaming, in ONE worker-thread call
    with its own short session: sync ``db``/``require`` dependencies would hold a pooled
    connection while waiting for the next thread, and a burst of stream openings (every tab
    reconnecting after a restart) then deadlocks the pool. The stream itself is async and
    touches no database. Past the user's ``max_streams_per_user`` streams: 429 before streaming.
    """

    def owner_and_collection() -> tuple[str, int]:
        with session_scope() as session:
            user = require("viewer")(optional_user(request, session))
            return user.name, get_or_404(session, name).id

    async with db_slot():  # the same request slots as every other route: no thread waits for a connection
        user, collection_id = await run_in_threadpool(owner_and_collection)
    return open_event_stream(collection_id, user)
