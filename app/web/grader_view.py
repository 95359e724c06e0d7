"""The grader picker's view model: each grader with its coverage, the primary one marked, a partial one warned."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.collections.graders import GraderCoverage, grader_coverage, pick, primary_coverage
from app.models import Collection


def option(coverage: GraderCoverage, primary: GraderCoverage | None) -> dict[str, Any]:
    return {
        "id": coverage.grader.id,
        "label": coverage.label,
        "coverage": coverage.summary,
        "complete": coverage.complete,
        "primary": primary is not None and coverage.grader.id == primary.grader.id,
        "warning": None
        if coverage.complete
        else f"partial grader: {coverage.summary} graded ({coverage.fraction:.1%}); results cover only those cells",
    }


def choices(
    session: Session, collection: Collection, chosen: int | None, coverage: list[GraderCoverage] | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """(every grader's option, the chosen one's, default the primary's; None when nothing is graded).

    A ``chosen`` id that is not a grader of the collection is NotFound (404), never a silent default.
    """
    coverage = grader_coverage(session, collection) if coverage is None else coverage
    primary = primary_coverage(session, collection, coverage)
    picked = pick(coverage, chosen) if chosen is not None else primary
    options = [option(c, primary) for c in coverage]
    return options, next((o for o in options if picked is not None and o["id"] == picked.grader.id), None)


def option_of(options: list[dict[str, Any]], grader_id: int) -> dict[str, Any] | None:
    """The option of grader ``grader_id`` among ``options`` (None: not a grader of the collection)."""
    return next((o for o in options if o["id"] == grader_id), None)


def regrade_note(session: Session, collection: Collection, shown: int) -> str | None:
    """One line when the grader a rubric edit regrades with is not the grader ``shown``, else None.

    A rubric edit regrades the changed items with the primary grader's spec (app/jobs/launch.py:
    collection_grader); a primary grader no job here wrote (imported grades) has no spec, so the
    edit grades with the default spec, as a different grader whose grades this page does not show.
    """
    from app.jobs.launch import regrade_spec

    coverage = grader_coverage(session, collection)
    primary = primary_coverage(session, collection, coverage)
    if primary is None or primary.grader.id != shown:
        return None
    spec, writes_primary = regrade_spec(session, collection)  # matched by grader id: no method is built
    if writes_primary:
        return None
    grader = primary.grader
    return (
        f"Rubric edits regrade with {spec.model_name} / {spec.prompt_class}, not with this primary grader "
        f"(#{grader.id} {grader.model} / {grader.prompt_class}): their new grades show under that grader."
    )
