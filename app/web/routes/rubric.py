"""Rubric editor, history, diff, revert, LLM drafts; the grid with overrides and flags."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Form, HTTPException, Request
from fastapi import Path as PathParam
from fastapi import Query as QueryParam
from fastapi.responses import RedirectResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.collections.nuggets_io import structure_view
from app.collections.schemas import (
    INT32_MAX,
    ITEM_ID_MAX,
    NO_NUL,
    PASSAGE_ID_MAX,
    QUERY_ID_MAX,
    SYSTEM_NAME_MAX,
)
from app.config import get_settings
from app.errors import Invalid
from app.grading.engine import CellScope
from app.grading.models import configured_models
from app.grading.service import GraderSpec, plan_for
from app.jobs.launch import collection_grader, launch_after_edit, launch_grading
from app.models import BankItem, Collection, Job, Passage, Query, RubricVersion
from app.review.flags import flags as item_flags
from app.rubrics import history
from app.rubrics.editing import ChildEdit, EditConflict, ItemChange, StructureEdit, apply_edit
from app.rubrics.generation import accept_draft
from app.rubrics.service import latest_version, version_by_number, version_item_pks
from app.web import grader_view, grid_view
from app.web.deps import CurrentUser, db, is_htmx, render, require
from app.web.query_nav import neighbours
from app.web.routes.collections import get_or_404
from app.web.security import path_for  # importing it registers the {...:any} path convertor

router = APIRouter()

# Bounds of the editor's form fields (item ids are bounded by their column, ITEM_ID_MAX).
MAX_TEXT = 20_000
MAX_NOTE = 2_000
MAX_POSITION = 100_000


def _query(session: Session, collection: Collection, query_id: str) -> Query:
    if len(query_id) > QUERY_ID_MAX or "\x00" in query_id:  # no stored query has such an id
        raise HTTPException(404, f"collection {collection.name!r} has no such query")
    query = session.scalar(select(Query).where(Query.collection_id == collection.id, Query.query_id == query_id))
    if query is None:
        raise HTTPException(404, f"collection {collection.name!r} has no query {query_id!r}")
    return query


def rubric_items(
    session: Session, collection: Collection, version: RubricVersion | None, query: Query
) -> list[dict[str, Any]]:
    pks = version_item_pks(session, version)
    items = {
        i.id: i for i in session.scalars(select(BankItem).where(BankItem.id.in_(pks), BankItem.query_pk == query.id))
    }
    flagged = item_flags(session, collection)
    return [
        {
            "item_id": items[pk].item_id,
            "text": items[pk].text,
            "kind": items[pk].kind,
            "gold": "; ".join(str(g) for g in items[pk].gold_answers or []),
            "importance": items[pk].importance,
            "weight": items[pk].weight,
            "structure": structure_view(items[pk].structure),
            "sub_edit": _sub_edit_view(items[pk].structure),
            "hash": items[pk].content_hash,
            "flagged": items[pk].item_id in flagged,
            "flag": flagged.get(items[pk].item_id),
        }
        for pk in pks
        if pk in items
    ]


def _sub_edit_view(structure: Any) -> dict[str, Any]:
    """The editor's sub-nugget rows: op and (id, text) of each child, with its own sub-nuggets read-only."""
    children = structure.get("children") if isinstance(structure, dict) else None
    rows = [
        {"id": str(c.get("id") or ""), "text": str(c.get("text", "")), "sub": structure_view(c)}
        for c in children or []
        if isinstance(c, dict)
    ]
    op = structure.get("op") if isinstance(structure, dict) else None
    return {"op": op if op in ("and", "or") else "or", "children": rows}


def _weight_field(raw: str | None) -> float | Literal[""] | None:
    """The form's weight: absent keeps the item's, blank clears it (the importance's default), else a number."""
    if raw is None:
        return None
    if not raw.strip():
        return ""
    try:
        return float(raw)
    except ValueError:
        raise Invalid(f"weight: a number, got {raw[:40]!r}") from None


def _structure_field(sub_op: str | None, sub_id: list[str], sub_text: list[str]) -> StructureEdit | None:
    """The form's sub-nugget rows (absent: kept as they are); a row left blank removes its sub-nugget."""
    if sub_op is None:
        return None
    if len(sub_id) != len(sub_text):
        raise Invalid("sub_id: one per sub_text (reload the page)")
    rows = zip(sub_id, sub_text, strict=True)
    return StructureEdit(sub_op, tuple(ChildEdit(text, child or None) for child, text in rows if text.strip()))


def _drafts(session: Session, collection: Collection, query: Query) -> list[dict[str, Any]]:
    drafts = []
    for version in session.scalars(
        select(RubricVersion).where(RubricVersion.collection_id == collection.id, RubricVersion.status == "draft")
    ):
        pks = version.bank_meta.get("draft_items", [])
        for item in session.scalars(select(BankItem).where(BankItem.id.in_(pks), BankItem.query_pk == query.id)):
            drafts.append({"version": version.number, "item_id": item.item_id, "text": item.text})
    return drafts


def _rubric_context(session: Session, collection: Collection, query: Query, user: CurrentUser) -> dict[str, Any]:
    version = latest_version(session, collection)
    return {
        "user": user,
        "collection": collection.name,
        "query": {"id": query.query_id, "text": query.text},
        "nav": neighbours(session, collection, query.query_id),
        "version": version.number if version else None,
        "items": rubric_items(session, collection, version, query),
        "drafts": _drafts(session, collection, query),
        "models": sorted(configured_models()),  # the drafting form offers only what an organizer configured
        "require_note": get_settings().require_edit_note,
        "conflict": None,
        "job": None,
        "saved": None,
        "passage": None,
    }


def _job_view(job: Job) -> dict[str, Any]:
    """The regrade a save or revert started: the message links it and follows its progress."""
    spec = GraderSpec.from_dict(job.params["grader"]) if job.params.get("grader") else GraderSpec()
    return {"id": job.id, "total": job.total, "state": job.state, "grader": f"{spec.model_name} / {spec.prompt_class}"}


def _saved_view(session: Session, collection: Collection, number: int) -> dict[str, Any] | None:
    """The "saved as version N" message: with the published version before it (the diff's other side) and its note."""
    version = session.scalar(
        select(RubricVersion).where(RubricVersion.collection_id == collection.id, RubricVersion.number == number)
    )
    if version is None:
        return None
    previous = session.scalar(
        select(RubricVersion.number)
        .where(
            RubricVersion.collection_id == collection.id,
            RubricVersion.status == "published",
            RubricVersion.number < number,
        )
        .order_by(RubricVersion.number.desc())
        .limit(1)
    )
    return {"number": number, "previous": previous, "note": version.note}


def _collection_job(session: Session, collection: Collection, job_id: int | None) -> Job | None:
    job = session.get(Job, job_id) if job_id else None
    return job if job is not None and job.collection_id == collection.id else None


@router.get("/c/{name}/rubric/{query_id:any}", name="rubric_page")
def rubric_page(
    name: str,
    query_id: str,
    request: Request,
    from_passage: str = QueryParam("", max_length=PASSAGE_ID_MAX, pattern=NO_NUL),
    saved: int | None = QueryParam(None, ge=1, le=INT32_MAX),
    job: int | None = QueryParam(None, ge=1, le=INT32_MAX),
    user: CurrentUser = Depends(require("viewer")),
    session: Session = db,
) -> Response:
    """The editor; ``from_passage`` shows that passage beside a question form prefilled with its first sentence.

    ``saved`` and ``job`` carry the message of a save made without htmx across its redirect. An
    htmx request gets the items block only (the page's redraw after a flag or unflag).
    """
    collection = get_or_404(session, name)
    context = _rubric_context(session, collection, _query(session, collection, query_id), user)
    if from_passage:
        text = session.scalar(
            select(Passage.text).where(Passage.collection_id == collection.id, Passage.passage_id == from_passage)
        )
        if text is not None:
            context["passage"] = {"id": from_passage, "text": text}
            context["prefill"] = text.split(". ")[0][:300]
    if saved:
        context["saved"] = _saved_view(session, collection, saved)
    found = _collection_job(session, collection, job)
    context["job"] = _job_view(found) if found else None
    return render(request, "rubric.html", context, block="items" if is_htmx(request) else None)


@router.post("/c/{name}/rubric/{query_id:any}/save", name="save_rubric")
def save_rubric(
    name: str,
    query_id: str,
    request: Request,
    action: Literal["edit", "add", "delete", "move"] = Form(...),
    item_id: str = Form("", max_length=ITEM_ID_MAX, pattern=NO_NUL),
    text: str = Form("", max_length=MAX_TEXT, pattern=NO_NUL),
    expected_text: str | None = Form(None, max_length=MAX_TEXT, pattern=NO_NUL),
    gold: str = Form("", max_length=MAX_TEXT, pattern=NO_NUL),
    position: int | None = Form(None, ge=0, le=MAX_POSITION),
    note: str = Form("", max_length=MAX_NOTE, pattern=NO_NUL),
    importance: Literal["", "vital", "okay"] | None = Form(None),
    weight: str | None = Form(None, max_length=40),
    sub_op: str | None = Form(None, max_length=20),  # present: the form edits the sub-nuggets (checked by the edit)
    sub_id: list[str] = Form([]),  # one per sub_text: an existing sub-nugget's id, "" for a new one
    sub_text: list[str] = Form([]),
    expected_hash: str | None = Form(None, max_length=64, pattern="^[0-9a-f]*$"),
    user: CurrentUser = Depends(require("judge")),
    session: Session = db,
) -> Response:
    """Save one change as a new version (a compare-and-swap, see ``apply_edit``), then regrade its cells.

    A lost race is a 409 showing both texts; the page's items block is re-rendered from the
    newest version so the judge can apply the change again. A save answers "saved as version N"
    with links to its diff and the leaderboard, and the regrade job it started.
    """
    collection = get_or_404(session, name)
    query = _query(session, collection, query_id)
    gold_answers = tuple(g.strip() for g in gold.split(";") if g.strip()) if gold.strip() else None
    change = ItemChange(
        action,
        query_id,
        item_id or None,
        text or None,
        gold_answers,
        expected_text,
        position,
        importance=importance,
        weight=_weight_field(weight),
        structure=_structure_field(sub_op, sub_id, sub_text),
        expected_hash=expected_hash or None,
    )
    try:
        result = apply_edit(
            session, collection, [change], user=user.name, note=note, require_note=get_settings().require_edit_note
        )
    except EditConflict as conflict:
        session.rollback()  # release the rubric lock now; the 409 page reads the newest version
        context = _rubric_context(session, collection, query, user)
        context["conflict"] = {
            "item_id": conflict.item_id,
            "yours": conflict.yours,
            "theirs": conflict.theirs,
            "message": str(conflict),
        }
        return render(request, "rubric.html", context, block="items" if is_htmx(request) else None, status=409)
    spec = collection_grader(session, collection)  # the primary grader's spec (app/jobs/launch.py)
    job = launch_after_edit(session, collection, result, spec, user.name)
    if not is_htmx(request):
        target = path_for(request, "rubric_page", name=name, query_id=query_id)
        return RedirectResponse(
            str(target.include_query_params(saved=result.version.number, job=job.id)), status_code=303
        )
    context = _rubric_context(session, collection, query, user)
    context["job"] = _job_view(job)
    context["saved"] = _saved_view(session, collection, result.version.number)
    return render(request, "rubric.html", context, block="items")


@router.post("/c/{name}/drafts/{number}/accept", name="accept_drafts")
async def accept_drafts(
    name: str,
    request: Request,
    number: int = PathParam(ge=1, le=INT32_MAX),
    user: CurrentUser = Depends(require("judge")),
    session: Session = db,
) -> Response:
    """Publish the checked draft items (the unchecked ones are rejected) and grade them."""
    accepted = [str(v) for v in (await request.form()).getlist("item_id")]
    collection = get_or_404(session, name)
    draft = version_by_number(session, collection, number)
    if draft.status != "draft":
        raise HTTPException(404, f"no draft version {number}")
    _publish_and_regrade(session, collection, accept_draft(session, collection, draft, accepted, user.name), user)
    return RedirectResponse(str(path_for(request, "collection_page", name=name)), status_code=303)


def _publish_and_regrade(session: Session, collection: Collection, version: RubricVersion, user: CurrentUser) -> None:
    """Grade whatever of the new version is not cached yet (the batches start after the commit)."""
    spec = collection_grader(session, collection)
    launch_grading(session, collection, spec, rubric_version=version.number, launched_by=user.name, kind="regrade")


@router.get("/c/{name}/history", name="history_page")
def history_page(
    name: str,
    request: Request,
    a: int | None = QueryParam(None, ge=1, le=INT32_MAX),
    b: int | None = QueryParam(None, ge=1, le=INT32_MAX),
    revert: int | None = QueryParam(None, ge=1, le=INT32_MAX),
    reverted: int | None = QueryParam(None, ge=1, le=INT32_MAX),
    job: int | None = QueryParam(None, ge=1, le=INT32_MAX),
    user: CurrentUser = Depends(require("viewer")),
    session: Session = db,
) -> Response:
    """The versions (who, when, what changed), a diff of two, and the confirmation step of a revert (``revert=N``)."""
    collection = get_or_404(session, name)
    found = _collection_job(session, collection, job)
    context = {
        "user": user,
        "collection": name,
        "versions": history.version_rows(session, collection),
        "current": current.number if (current := latest_version(session, collection)) else None,
        "diff": history.diff_versions(session, collection, a, b) if a and b else None,
        "a": a,
        "b": b,
        "confirm": _revert_view(session, collection, revert) if revert and user.can("judge") else None,
        "reverted": _saved_view(session, collection, reverted) if reverted else None,
        "job": _job_view(found) if found else None,
    }
    return render(request, "history.html", context)


def _revert_view(session: Session, collection: Collection, number: int) -> dict[str, Any]:
    """The numbers the revert confirmation states: the new version, its items, and the cells it regrades."""
    plan = history.revert_plan(session, collection, number)
    spec = collection_grader(session, collection)
    scope = CellScope(item_ids=frozenset(plan.added_item_ids))
    cells = len(plan_for(session, collection, spec, number, scope)) if plan.added_item_ids else 0
    return {"plan": plan, "cells": cells, "grader": f"{spec.model_name} / {spec.prompt_class}"}


@router.post("/c/{name}/revert/{number}", name="revert")
def revert(
    name: str,
    request: Request,
    number: int = PathParam(ge=1, le=INT32_MAX),
    user: CurrentUser = Depends(require("judge")),
    session: Session = db,
) -> Response:
    """Publish version ``number``'s items as a new version and grade the ones the newest version lacked."""
    collection = get_or_404(session, name)
    result = history.revert(session, collection, number, user=user.name)
    job = launch_after_edit(session, collection, result, collection_grader(session, collection), user.name)
    target = path_for(request, "history_page", name=name)
    return RedirectResponse(
        str(target.include_query_params(reverted=result.version.number, job=job.id)), status_code=303
    )


@router.get("/c/{name}/grid/{query_id:any}", name="grid_page")
def grid_page(
    name: str,
    query_id: str,
    request: Request,
    system: str = QueryParam("", max_length=SYSTEM_NAME_MAX, pattern=NO_NUL),
    judged: str = QueryParam("any", pattern="^(any|judged|unjudged)$"),
    min_grade: str = QueryParam("", pattern="^[0-5]?$"),  # "" is the form's "any"
    disagree: bool = False,
    page: int = QueryParam(1, ge=1, le=1_000_000),
    grader: int | None = QueryParam(None, ge=1, le=INT32_MAX),
    sort: grid_view.Sort = "grade",
    compact: grid_view.Compact = "auto",  # "auto": on from grid_view.COMPACT_FROM question columns
    user: CurrentUser = Depends(require("viewer")),
    session: Session = db,
) -> Response:
    collection = get_or_404(session, name)
    query = _query(session, collection, query_id)
    grade_floor = int(min_grade) if min_grade else None
    filters = grid_view.GridFilters(system or None, judged, grade_floor, disagree, page, sort, compact)
    graders, chosen = grader_view.choices(session, collection, grader)  # default: the primary grader
    view = grid_view.build(session, collection, query, chosen["id"] if chosen else None, filters)
    context = {
        "user": user,
        "collection": name,
        "query": {"id": query.query_id, "text": query.text},
        "grid": view,
        "filters": filters,
        "graders": graders,
        "grader_view": chosen,
        "nav": grid_view.navigation(session, collection, query),
        "sorts": grid_view.SORTS,
        "compact_choices": grid_view.COMPACT,
    }
    # htmx restoring a pushed URL (its history cache missed) needs the whole page, not the fragment
    fragment = is_htmx(request) and request.headers.get("hx-history-restore-request") != "true"
    return render(request, "grid.html", context, block="grid" if fragment else None)
