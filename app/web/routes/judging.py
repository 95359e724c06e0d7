"""Judges' actions on cells and items: override (set, accept, clear), undo, flag and unflag.

Each answers the state it left as JSON, so the page redraws from the server's word; the services
in ``app/review`` log every action and publish after the commit.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Form
from sqlalchemy.orm import Session

from app.collections.schemas import ID_MAX, INT32_MAX, ITEM_ID_MAX, NO_NUL
from app.review import flags, overrides
from app.web.deps import CurrentUser, db, require
from app.web.routes.collections import get_or_404

router = APIRouter()

MAX_REASON = 2_000


@router.post("/c/{name}/override", name="override")
def override(
    name: str,
    pool_entry: int = Form(..., ge=1, le=ID_MAX),
    item_id: str = Form(..., max_length=ITEM_ID_MAX, pattern=NO_NUL),
    action: Literal["set", "accept", "clear"] = Form("set"),
    rating: int | None = Form(None),  # 0..5 for "set", checked by the service (a 400 naming the scale)
    grader: int | None = Form(None, ge=1, le=INT32_MAX),  # the grader whose grade the judge was shown
    source: Literal["grid", "queue", "sample"] = Form("grid"),
    user: CurrentUser = Depends(require("judge")),
    session: Session = db,
) -> dict[str, Any]:
    """Set the judge's grade on a cell, accept the grader's grade as the judge's, or clear the judge's grade."""
    collection = get_or_404(session, name)
    state = overrides.record(
        session,
        collection,
        pool_entry,
        item_id,
        action=action,
        judge=user.name,
        rating=rating,
        grader_pk=grader,
        source=source,
    )
    return state.as_json()


@router.post("/c/{name}/override/undo", name="undo_override")
def undo_override(
    name: str,
    user: CurrentUser = Depends(require("judge")),
    session: Session = db,
) -> dict[str, Any]:
    """Reverse this judge's newest action (409 when another judge has changed that cell since)."""
    return overrides.undo_last(session, get_or_404(session, name), user.name).as_json()


@router.post("/c/{name}/flag", name="flag")
def flag(
    name: str,
    item_id: str = Form(..., max_length=ITEM_ID_MAX, pattern=NO_NUL),
    reason: str = Form("spurious", max_length=MAX_REASON, pattern=NO_NUL),
    user: CurrentUser = Depends(require("judge")),
    session: Session = db,
) -> dict[str, Any]:
    flags.flag_item(session, get_or_404(session, name), item_id, judge=user.name, reason=reason)
    return {"item_id": item_id, "flagged": True, "by": user.name}


@router.post("/c/{name}/unflag", name="unflag")
def unflag(
    name: str,
    item_id: str = Form(..., max_length=ITEM_ID_MAX, pattern=NO_NUL),
    user: CurrentUser = Depends(require("judge")),
    session: Session = db,
) -> dict[str, Any]:
    flags.unflag_item(session, get_or_404(session, name), item_id)
    return {"item_id": item_id, "flagged": False, "by": user.name}
