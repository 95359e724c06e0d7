"""The review queue page (one cell at a time, keyboard-driven) and the judges' statistics page.

The page's actions POST to the judging routes (``override``, ``undo_override``); the next cell
comes back as the ``cell`` block of review.html. Queue, progress and agreement are computed in
``app/review``; this module only gathers the texts of the one cell shown.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi import Query as QueryParam
from fastapi.responses import Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.collections.queries import load_answers_of
from app.collections.schemas import INT32_MAX, ITEM_ID_MAX, NO_NUL, QUERY_ID_MAX
from app.models import BankItem, Collection, GradeOverride, Judgment, Passage, Query, RubricVersionItem
from app.review import agreement, progress
from app.review.queue import OFFSET, Queue, QueueCell, QueueRequest, find_cell, next_cells
from app.rubrics.service import latest_version
from app.web import grader_view
from app.web.deps import CurrentUser, db, is_htmx, render, require
from app.web.routes.collections import get_or_404

router = APIRouter()


def _item(session: Session, collection: Collection, item_id: str) -> dict[str, Any]:
    """The item as the newest rubric version holds it (else its newest text): kind, text, gold answers."""
    statement = select(BankItem).where(BankItem.collection_id == collection.id, BankItem.item_id == item_id)
    version = latest_version(session, collection)
    if version is not None:
        statement = statement.join(RubricVersionItem, RubricVersionItem.item_pk == BankItem.id).where(
            RubricVersionItem.version_pk == version.id
        )
    item = session.scalar(statement.order_by(BankItem.id.desc()).limit(1))
    if item is None:
        return {"id": item_id, "kind": "item", "text": "", "gold": []}
    return {"id": item_id, "kind": item.kind, "text": item.text, "gold": [str(g) for g in item.gold_answers or []]}


def cell_view(session: Session, collection: Collection, queue: Queue, cell: QueueCell) -> dict[str, Any]:
    """Everything the page shows about one cell: texts, grades, the manual judgment, why it was chosen."""
    query_text = session.scalar(
        select(Query.text).where(Query.collection_id == collection.id, Query.query_id == cell.query_id)
    )
    passage_text = session.scalar(
        select(Passage.text).where(Passage.collection_id == collection.id, Passage.passage_id == cell.passage_id)
    )
    judgments = list(
        session.scalars(
            select(Judgment.relevance).where(Judgment.pool_entry_pk == cell.pool_entry).order_by(Judgment.ordinal)
        )
    )
    override = session.execute(
        select(GradeOverride.rating, GradeOverride.judge).where(
            GradeOverride.pool_entry_pk == cell.pool_entry, GradeOverride.item_id == cell.item_id
        )
    ).first()
    answer = load_answers_of(session, queue.grader.id, [(cell.pool_entry, cell.item_id)]).get(
        (cell.pool_entry, cell.item_id)
    )
    return {
        "cell": cell,
        "query_text": query_text or "",
        "passage_text": passage_text or "(no text imported for this passage)",
        "item": _item(session, collection, cell.item_id),
        "answer": answer,
        "judgments": judgments,
        "override": {"rating": override[0], "judge": override[1]} if override else None,
    }


def _progress_line(session: Session, collection: Collection, queue: Queue, judge: str) -> dict[str, Any]:
    summary = progress.progress(session, collection, queue.per_query)
    mine = next((j for j in summary.judges if j.judge == judge), None)
    return {
        "mine": mine,
        "remaining": queue.remaining,
        "total": queue.total,
        "done": queue.total - queue.remaining,
    }


@router.get("/c/{name}/review", name="review_page")
def review_page(
    name: str,
    request: Request,
    mode: Literal["priority", "uniform"] = "priority",
    query: str = QueryParam("", max_length=QUERY_ID_MAX, pattern=NO_NUL),
    grader: int | None = QueryParam(None, ge=1, le=INT32_MAX),
    exclude: Literal["any", "mine"] = "any",
    offset: int = QueryParam(0, ge=OFFSET[0], le=OFFSET[1]),
    min_rating: int = QueryParam(4, ge=0, le=5),
    pool_entry: int | None = QueryParam(None, ge=1, le=INT32_MAX),  # show this cell (after an undo)
    item_id: str = QueryParam("", max_length=ITEM_ID_MAX, pattern=NO_NUL),
    user: CurrentUser = Depends(require("viewer")),
    session: Session = db,
) -> Response:
    """One cell of the judge's queue; an htmx request gets the ``cell`` block only."""
    collection = get_or_404(session, name)
    graders, chosen = grader_view.choices(session, collection, grader)
    context: dict[str, Any] = {
        "user": user,
        "collection": name,
        "graders": graders,
        "grader_view": chosen,
        "mode": mode,
        "exclude": exclude,
        "query_filter": query,
        "min_rating": min_rating,
        "offset": offset,
        "view": None,
    }
    if chosen is not None:
        queue_request = QueueRequest(
            judge=user.name,
            mode=mode,
            grader_id=chosen["id"],
            query_id=query or None,
            exclude=exclude,
            min_rating=min_rating,
        )
        queue = next_cells(session, collection, queue_request, offset=offset)
        shown = (
            find_cell(session, collection, queue_request, pool_entry, item_id)
            if pool_entry is not None
            else (queue.cells[0] if queue.cells else None)
        )
        kept = {"mode": mode, "grader": chosen["id"], "exclude": exclude, "min_rating": min_rating}
        if query:
            kept["query"] = query
        context.update(
            queue=queue,
            queries=sorted(queue.per_query),
            view=cell_view(session, collection, queue, shown) if shown is not None else None,
            progress=_progress_line(session, collection, queue, user.name),
            page_params=kept,
        )
    return render(request, "review.html", context, block="cell" if is_htmx(request) else None)


@router.get("/c/{name}/review/stats", name="review_stats")
def review_stats(
    name: str,
    request: Request,
    grader: int | None = QueryParam(None, ge=1, le=INT32_MAX),
    min_rating: int = QueryParam(4, ge=0, le=5),
    user: CurrentUser = Depends(require("viewer")),
    session: Session = db,
) -> Response:
    """Progress per judge and per query, κ between judges, and each judge against the grader over time."""
    collection = get_or_404(session, name)
    graders, chosen = grader_view.choices(session, collection, grader)
    in_queue: dict[str, int] = {}
    if chosen is not None:
        queue_request = QueueRequest(judge=user.name, grader_id=chosen["id"], min_rating=min_rating)
        in_queue = next_cells(session, collection, queue_request).per_query
    context = {
        "user": user,
        "collection": name,
        "graders": graders,
        "grader_view": chosen,
        "min_rating": min_rating,
        "progress": progress.progress(session, collection, in_queue),
        "agreement": agreement.review_agreement(session, collection, threshold=min_rating),
    }
    return render(request, "review.html", {**context, "page": "stats"})
