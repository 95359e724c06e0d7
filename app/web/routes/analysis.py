"""Leaderboard (live), version/grader comparison, exports, agreement dashboard, oversight views, SSE.

The routes parse parameters, call one analysis of a domain package (app/leaderboards/analysis.py,
app/agreement/analysis.py, app/oversight), build a view model and render it: no science here
(tests/web/test_routes_no_science.py keeps scipy, numpy and app.evaluation out of this package).
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, PlainTextResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.background import BackgroundTask

from app.agreement import external
from app.agreement.analysis import AgreementAnalysis, agreement_analysis, agreement_analysis_json
from app.agreement.calibration import load_calibration
from app.agreement.service import as_table
from app.collections import bundle as bundles
from app.collections.graders import resolve_grader
from app.collections.queries import GraderRef
from app.db import session_scope
from app.evaluation.formatting import render_tables  # presentation only: a Table as tsv, LaTeX or Markdown
from app.events import open_event_stream
from app.leaderboards import measures
from app.leaderboards import params as bounds
from app.leaderboards.analysis import (
    CompareAnalysis,
    LeaderboardAnalysis,
    all_pairs_summary,
    compare_analysis,
    compare_json,
    leaderboard_analysis,
    leaderboard_analysis_json,
    overall_explanation,
    significance_tables,
)
from app.leaderboards.params import bounded_int
from app.leaderboards.ppi import MIN_SUPPORT, estimate_view, ppi_table, sample_line
from app.leaderboards.service import (
    LeaderboardRequest,
    check_request,
    default_version,
    evaluation_data,
    leaderboard_table,
    qrels_for,
)
from app.models import Collection, RubricVersion
from app.oversight import service as oversight_pages
from app.review import flags
from app.review.flags import Flag
from app.web import charts, grader_view
from app.web.deps import CurrentUser, db, db_slot, is_htmx, optional_user, render, require
from app.web.routes.collections import get_or_404
from app.web.security import content_disposition

router = APIRouter()


def _grader(session: Session, collection: Collection, grader_id: int | None) -> GraderRef:
    """The grader by id (the picker), else the collection's primary grader: never the last job's by accident."""
    return resolve_grader(session, collection, grader_id=grader_id)


def _request(
    session: Session, collection: Collection, params: dict[str, Any], *, bootstrap_samples: int = 1000
) -> LeaderboardRequest:
    """The page's query string as a typed request: bounded numbers, a grader by id, a measure value."""
    grader_id = bounded_int(params, "grader", bounds.ID)
    version = bounded_int(params, "version", bounds.VERSION)
    min_rating = bounded_int(params, "min_rating", bounds.MIN_RATING, 4)
    top_k = bounded_int(params, "top_k", bounds.TOP_K, 20) or 20
    grader = _grader(session, collection, grader_id)
    request = LeaderboardRequest(
        measure=measures.parse(str(params.get("measure") or measures.DEFAULT)),
        min_rating=min_rating,
        top_k=top_k,
        label=str(params.get("label") or "max"),
        grader_id=grader.id,
        rubric_version=version if version is not None else default_version(session, collection, grader),
        include_overrides=_flag(params, "overrides"),
        exclude_flagged=_flag(params, "exclude_flagged"),
        bootstrap_samples=bootstrap_samples,
    )
    return check_request(request)


def _per_query_level(params: dict[str, Any]) -> int | None:
    return bounded_int(params, "min_judgment", bounds.MANUAL_LEVEL, bounds.DEFAULT_MANUAL_LEVEL)


def _flag(params: dict[str, Any], name: str) -> bool:
    return params.get(name) in ("1", "on", "true")


def _analysis(
    session: Session,
    collection: Collection,
    params: dict[str, Any],
    *,
    significance: bool | None = None,
    ppi: bool | None = None,
) -> LeaderboardAnalysis:
    """The leaderboard the page and its JSON export show (with per-query correlation for a trec measure).

    ``significance`` and ``ppi`` None: as the query string asks (``significance=1``, ``ppi=1``: what
    the exports follow).
    """
    return leaderboard_analysis(
        session,
        collection,
        _request(session, collection, params),
        per_query_level=_per_query_level(params),
        significance=_flag(params, "significance") if significance is None else significance,
        trials=bounded_int(params, "trials", bounds.TRIALS, bounds.DEFAULT_TRIALS) or bounds.DEFAULT_TRIALS,
        ppi=_flag(params, "ppi") if ppi is None else ppi,
    )


def _rank_text(rank: float | None) -> str:
    """An official rank as the list prints it: an integer where it is one."""
    if rank is None:
        return ""
    return str(int(rank)) if float(rank).is_integer() else f"{rank:g}"


def _live_triggers(request: LeaderboardRequest) -> str:
    """The SSE events after which the board re-fetches: grades always, overrides and flags when they count."""
    events = ["sse:grades"]
    if request.include_overrides:
        events.append("sse:overrides")
    if request.exclude_flagged:
        events.append("sse:flags")
    return ", ".join(events)


def _system_rows(result: LeaderboardAnalysis) -> list[dict[str, Any]]:
    """One row per ranked system, best first: rank (with "=" for ties), scores, official rank, group."""
    scores = {s.system: s for s in result.board.systems}
    official_counts = Counter(s.official_rank for s in result.board.systems if s.official_rank is not None)
    tests = result.significance
    vs_next = {t.better: t for t in tests.adjacent} if tests else {}
    group_sizes = Counter(tests.groups.values()) if tests else Counter()
    rows = []
    for place in result.ranked:
        s = scores[place.system]
        test = vs_next.get(place.system)
        group = tests.groups.get(place.system) if tests else None
        rows.append(
            {
                "name": s.system,
                "rank": place.rank,
                "rank_text": f"={place.rank}" if place.tied else str(place.rank),
                "tied": place.tied,
                "n_queries": place.n_queries,
                "score": s.score,
                "stderr": s.stderr,
                "ci_low": s.ci_low,
                "ci_high": s.ci_high,
                "official": _rank_text(s.official_rank),
                "official_tied": s.official_rank is not None and official_counts[s.official_rank] > 1,
                "group": group,
                "grouped": group is not None and group_sizes[group] > 1,
                "group_parity": (group or 0) % 2,
                "p_next": None if test is None else test.p_randomisation,
                "distinct_next": None if test is None else test.distinct,
            }
        )
    return rows


ALL_PAIRS_SHOWN = 500  # rows of the page's all-pairs table (59 systems have 1,711 pairs): the rest are in the exports


def board_view(session: Session, collection: Collection, params: dict[str, Any]) -> dict[str, Any]:
    """The leaderboard page's view model: ranked rows, the overall row apart, charts, live triggers."""
    result = _analysis(session, collection, params, significance=True, ppi=True)
    board, grader, predicted = result.board, result.grader, result.predicted
    ranked = [s for s in board.systems if s.system in predicted]  # the overall row is no system
    points = [(s.system, s.score, s.official_rank) for s in ranked if s.official_rank is not None]
    overall = result.overall
    return {
        "request": result.request,
        "grader": {"id": grader.id, "label": f"{grader.model} / {grader.prompt_class}"},
        # the exports compute what this page shows: the grader it resolved, by id, whatever the URL omitted
        "export_params": {**{k: v for k, v in params.items() if k not in ("significance", "ppi")}, "grader": grader.id},
        "systems": _system_rows(result),
        "overall": None
        if overall is None
        else {
            "name": overall.system,
            "score": overall.score,
            "n_queries": len(overall.per_query),
            "explanation": overall_explanation(board.measure),
        },
        "significance": result.significance,
        "all_pairs": None if result.significance is None else all_pairs_summary(result.significance),
        "all_pairs_shown": ALL_PAIRS_SHOWN,
        "ppi": _ppi_view(result),
        "live_triggers": _live_triggers(result.request),
        "correlation": board.correlation,
        "per_query": _per_query_rows(result),
        "errorbars": charts.error_bars([(s.system, s.score, s.ci_low, s.ci_high) for s in ranked], board.measure),
        "scatter": charts.rank_scatter(points, board.measure),
    }


def _ppi_view(result: LeaderboardAnalysis) -> dict[str, Any] | None:
    """The "Prediction-powered estimates" section: per system plain → PPI [CI] for Cover and P@k, and the sample."""
    board = result.ppi
    if board is None:
        return None
    ranks = {r.system: f"={r.rank}" if r.tied else str(r.rank) for r in result.ranked}
    rows = [
        {
            "name": s.system,
            "rank": ranks.get(s.system, ""),
            "cover": estimate_view(s.cover),
            "precision": None if s.precision is None else estimate_view(s.precision),
        }
        for s in board.systems
    ]
    tuned = next((s.precision for s in board.systems if s.precision is not None), None)
    return {
        "rows": rows,
        "tuning": tuned.tuning if tuned is not None and tuned.n_labels >= 2 else None,
        "min_support": MIN_SUPPORT,
        "measure": board.precision_measure,
        "sample_line": sample_line(board),
        "n_rows": board.sample.n_rows,
        "incomplete": board.sample.incomplete,
        "confidence": round((1 - board.alpha) * 100),
        "top_k": board.top_k,
        "min_rating": board.min_rating,
        "level": board.level,
        "note": board.precision_note,
        "with_overrides": result.request.include_overrides,
    }


def _per_query_rows(result: LeaderboardAnalysis) -> dict[str, Any] | None:
    """Per query: the systems ordered by the measure on derived qrels vs on the manual judgments (None: Cover)."""
    per_query = result.per_query
    if per_query is None:
        return None
    rows = [
        {
            "query": q,
            "spearman": c.correlation.spearman,
            "kendall": c.correlation.kendall,
            "n": c.correlation.n_systems,
            "reason": None if c.reason is None else c.reason.text,
        }
        for q, c in sorted(per_query.queries.items())
    ]
    return {"min_rating": per_query.min_rating, "min_judgment": per_query.min_judgment, "rows": rows}


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
        "measures": [m.name for m in measures.MENU],
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
        "regrade_note": grader_view.regrade_note(session, collection, board["grader"]["id"]),
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
    formats = {"tsv": "tsv", "tex": "latex", "md": "md"}
    if fmt != "json" and fmt not in formats:
        raise HTTPException(404, "export as .tsv, .json, .tex or .md")
    collection = get_or_404(session, name)
    result = _analysis(session, collection, dict(request.query_params))
    headers = {"X-Grader-Id": str(result.grader.id)}  # the body's settings name it too (model, prompt class, template)
    if fmt == "json":
        body = json.dumps(leaderboard_analysis_json(result), indent=1)
        return Response(body, media_type="application/json", headers=headers)
    tables = [leaderboard_table(result.board)]
    if result.significance is not None:
        tables.extend(significance_tables(result.significance))
    if result.ppi is not None:
        tables.append(ppi_table(result.ppi))
    table = render_tables(tables, formats[fmt])  # type: ignore[arg-type]
    return PlainTextResponse(table, headers=headers)


@router.get("/c/{name}/qrels", name="qrels_export")
def qrels_export(
    name: str, request: Request, user: CurrentUser = Depends(require("viewer")), session: Session = db
) -> Response:
    collection = get_or_404(session, name)
    lb_request = _request(session, collection, dict(request.query_params))
    qrels = qrels_for(evaluation_data(session, collection, lb_request), lb_request)
    lines = [f"{q} 0 {p} {label}\n" for q, docs in sorted(qrels.items()) for p, label in sorted(docs.items())]
    headers = {"Content-Disposition": content_disposition(f"{name}.qrels"), "X-Grader-Id": str(lb_request.grader_id)}
    return PlainTextResponse("".join(lines), headers=headers)


@router.get("/c/{name}/bundle.tar.gz", name="bundle_export")
def bundle_export(
    name: str, request: Request, user: CurrentUser = Depends(require("viewer")), session: Session = db
) -> Response:
    """The reproducibility bundle of the board the page shows (docs/bundles.md): its manifest's command
    prints what ``leaderboard.json`` with the same query string answers. Built in a temporary file,
    one build at a time per process (429 while one runs), then streamed from disk."""
    collection = get_or_404(session, name)
    params = dict(request.query_params)
    settings = bundles.board_settings(
        _request(session, collection, params),
        per_query_level=_per_query_level(params),
        significance=_flag(params, "significance"),
        trials=bounded_int(params, "trials", bounds.TRIALS, bounds.DEFAULT_TRIALS) or bounds.DEFAULT_TRIALS,
    )
    with bundles.build_slot():
        handle = tempfile.NamedTemporaryFile(prefix="rubric-bundle-", suffix=".tar.gz", delete=False)  # noqa: SIM115
        handle.close()
        path = Path(handle.name)
        try:
            bundles.write_bundle(session, collection, settings, path)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
    return FileResponse(
        path,
        media_type="application/gzip",
        headers={"Content-Disposition": content_disposition(f"{name}.bundle.tar.gz")},
        background=BackgroundTask(path.unlink, missing_ok=True),
    )


# ---- compare --------------------------------------------------------------------------------


def _compare(session: Session, collection: Collection, params: dict[str, Any]) -> CompareAnalysis:
    """A and B: the page's settings with each side's version and grader (CIs are not shown: none drawn)."""
    for key, limits in (("a_version", bounds.VERSION), ("b_version", bounds.VERSION)):
        bounded_int(params, key, limits)
    for key in ("a_grader", "b_grader"):
        bounded_int(params, key, bounds.ID)
    sides = [
        leaderboard_analysis(
            session,
            collection,
            _request(
                session,
                collection,
                {**params, "version": params.get(f"{side}_version"), "grader": params.get(f"{side}_grader")},
                bootstrap_samples=0,
            ),
        )
        for side in ("a", "b")
    ]
    return compare_analysis(*sides)


@router.get("/c/{name}/compare", name="compare_page")
def compare_page(
    name: str, request: Request, user: CurrentUser = Depends(require("viewer")), session: Session = db
) -> Response:
    """Two leaderboards (rubric versions or graders) side by side: rank changes and Kendall τ between them."""
    params = dict(request.query_params)
    collection = get_or_404(session, name)
    result = _compare(session, collection, params)
    choices = _choices(session, collection)
    coverage = {
        side.grader.id: grader_view.option_of(choices["graders"], side.grader.id) for side in (result.a, result.b)
    }
    return render(
        request,
        "compare.html",
        {"user": user, "collection": name, "compare": result, "coverage": coverage, "params": params, **choices},
    )


@router.get("/c/{name}/compare.json", name="compare_export")
def compare_export(
    name: str, request: Request, user: CurrentUser = Depends(require("viewer")), session: Session = db
) -> Response:
    """The compare page's numbers as JSON: the same contract as ``rubric compare --format json``."""
    result = _compare(session, get_or_404(session, name), dict(request.query_params))
    return Response(json.dumps(compare_json(result), indent=1), media_type="application/json")


# ---- agreement ------------------------------------------------------------------------------


def _agreement(
    session: Session, collection: Collection, grader: int | None, min_answers: int, min_judgment: int
) -> AgreementAnalysis:
    chosen = _grader(session, collection, grader)
    return agreement_analysis(
        session, collection, grader_id=chosen.id, min_answers=(min_answers,), min_judgment=min_judgment
    )


def agreement_view(result: AgreementAnalysis, flagged: dict[str, Flag] | None = None, me: str = "") -> dict[str, Any]:
    """The agreement page's view model: tables with their heat, the sweep, the worst 50 items (with their
    question and flag), the overrides."""
    return {
        "tables": [_table_view(t) for t in result.tables],
        "sweep": result.sweep,
        "per_item": [
            {
                "query_id": r.query_id,
                "item_id": r.item_id,
                "item_text": r.item_text,
                "kappa": r.kappa,
                "confusion": r.confusion,
                "flag": flag_view((flagged or {}).get(r.item_id), me),
            }
            for r in result.per_item[:50]
        ],
        "n_items": len(result.per_item),
        "overrides": result.overrides,
        "judged_passages": result.judged_passages,
    }


def _table_view(raw: Any) -> dict[str, Any]:
    table = as_table(raw)
    peak = max((c for row in raw.counts for c in row), default=1) or 1
    return {
        "title": table.title,
        "columns": table.columns,
        "rows": table.rows,
        "heat": [[c / peak for c in row] for row in raw.counts],
        "n_counts": len(raw.columns),
    }


MinAnswers = Query(1, ge=bounds.MIN_ANSWERS[0], le=bounds.MIN_ANSWERS[1])
MinJudgment = Query(2, ge=bounds.MIN_JUDGMENT_RANGE[0], le=bounds.MIN_JUDGMENT_RANGE[1])
GraderParam = Query(None, ge=bounds.ID[0], le=bounds.ID[1])


@router.get("/c/{name}/agreement", name="agreement_page")
def agreement_page(
    name: str,
    request: Request,
    min_answers: int = MinAnswers,
    min_judgment: int = MinJudgment,
    grader: int | None = GraderParam,
    judge: str | None = Query(None, max_length=external.NAME_MAX),  # another judge's qrels: app/agreement/external.py
    min_external: int = Query(external.DEFAULT_MIN_EXTERNAL, ge=1, le=external.EXTERNAL_LEVEL[1]),
    judge_measure: str = Query(external.DEFAULT_JUDGE_MEASURE, max_length=external.MEASURE_MAX),
    user: CurrentUser = Depends(require("viewer")),
    session: Session = db,
) -> Response:
    collection = get_or_404(session, name)
    result = _agreement(session, collection, grader, min_answers, min_judgment)
    other = external.external_section(
        session,
        collection,
        grader_id=result.grader.id,
        judge=judge,
        min_external=min_external,
        measure=judge_measure,
        min_judgment=min_judgment,
    )
    return render(
        request,
        "agreement.html",
        {
            "user": user,
            "collection": name,
            "view": agreement_view(result, flags.flags(session, collection), user.name),
            "calibration": load_calibration(session, collection, result.grader.id),
            "external": other,
            "min_answers": min_answers,
            "min_judgment": min_judgment,
            "grader": result.grader.id,
            **_choices(session, collection, result.grader.id),
        },
    )


@router.get("/c/{name}/agreement.json", name="agreement_export")
def agreement_export(
    name: str,
    min_answers: int = MinAnswers,
    min_judgment: int = MinJudgment,
    grader: int | None = GraderParam,
    user: CurrentUser = Depends(require("viewer")),
    session: Session = db,
) -> Response:
    """The agreement page's numbers as JSON: the contract of ``rubric agreement --sweep --format json``."""
    collection = get_or_404(session, name)
    result = _agreement(session, collection, grader, min_answers, min_judgment)
    calibration = load_calibration(session, collection, result.grader.id).as_json()
    return Response(
        json.dumps({**agreement_analysis_json(result), "calibration": calibration}, indent=1),
        media_type="application/json",
    )


# ---- flags and item cells (oversight and agreement tables) -------------------------------------


def flag_view(flag: Flag | None, me: str) -> dict[str, Any]:
    """An item's flag as a table shows it: who flagged it and when, in words (never by colour alone)."""
    if flag is None:
        return {"flagged": False, "text": "not flagged"}
    by = "you" if flag.flagged_by == me else flag.flagged_by
    reason = f" ({flag.reason})" if flag.reason and flag.reason != "spurious" else ""
    return {"flagged": True, "text": f"flagged by {by} · {flag.at}{reason}"}


def oversight_rows(shown: oversight_pages.OversightPage, flagged: dict[str, Flag], me: str) -> dict[str, Any]:
    """The page's table: the item column shows the question (``item_text``; the id rides along for the
    flag buttons and the filters), one column fewer than the CLI's; rows with an item carry its flag."""
    columns = list(shown.columns)
    item_at = columns.index("item") if "item" in columns else None
    text_at = columns.index("item_text") if "item_text" in columns else None
    headers = ["question" if c == "item" else c for i, c in enumerate(columns) if i != text_at]
    rows = []
    for row in shown.rows:
        item_id = None if item_at is None else str(row[item_at])
        cells: list[dict[str, Any]] = []
        for i, value in enumerate(row):
            if i == item_at:
                cells.append({"item": item_id, "text": "" if text_at is None else str(row[text_at])})
            elif i != text_at:
                cells.append({"value": value})
        flag = None if item_id is None else flag_view(flagged.get(item_id), me)
        text = "" if text_at is None else str(row[text_at])
        rows.append({"query": row[0], "key": row[1], "item": item_id, "text": text, "cells": cells, "flag": flag})
    return {"headers": headers, "rows": rows, "flags": item_at is not None}


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
    """One page (at most PER_PAGE rows) of an oversight view, filtered by query, item and grade server-side."""
    collection = get_or_404(session, name)
    if view not in oversight_pages.CLI_ANALYSES:
        raise HTTPException(404, "views: bad, uncovered, verify, impact")
    chosen = _grader(session, collection, grader)
    filters = oversight_pages.RowFilter(
        query or None, item or None, bounded_int({"grade": grade}, "grade", oversight_pages.GRADE)
    )
    shown = oversight_pages.oversight_page(
        session,
        collection,
        view,
        chosen,
        thresholds=oversight_pages.Thresholds(min_rating, min_judgment),
        filters=filters,
        page=page,
    )
    return render(
        request,
        "oversight.html",
        {
            "user": user,
            "collection": name,
            "view": view,
            "table": shown,
            "shown": oversight_rows(shown, flags.flags(session, collection), user.name),
            "filters": shown.filters,
            "query_ids": oversight_pages.query_choices(session, collection),
            "page_params": _page_params(min_rating, min_judgment, chosen.id, shown.filters),
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
