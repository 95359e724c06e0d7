"""Collections: the list, the import form (organizers) and the overview page."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, File, Form, Request, UploadFile
from fastapi.responses import RedirectResponse, Response
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.collections import service
from app.collections.errors import CollectionNotFound, ImportFormatError
from app.collections.importing import ImportFiles, import_files
from app.collections.queries import collection_summaries, describe_grader, graders_of
from app.models import Collection, Grade, Job, Judgment, PoolEntry, Query, RubricVersion, System
from app.rubrics.service import latest_version
from app.web.deps import CurrentUser, db, render, require

router = APIRouter()


def get_or_404(session: Session, name: str) -> Collection:
    from fastapi import HTTPException

    try:
        return service.get_collection(session, name)
    except CollectionNotFound as error:
        raise HTTPException(404, str(error)) from None


@router.get("/")
def collections_page(
    request: Request, user: CurrentUser = Depends(require("viewer")), session: Session = db
) -> Response:
    return render(request, "collections.html", {"user": user, "collections": _summaries(session), "errors": []})


def _summaries(session: Session) -> list[dict[str, Any]]:
    return [{"name": n, "queries": q, "passages": p, "systems": s} for n, q, p, s in collection_summaries(session)]


@router.post("/collections/import")
async def import_collection(
    request: Request,
    name: str = Form(...),
    passages: list[UploadFile] = File(default=[]),
    queries: list[UploadFile] = File(default=[]),
    bank: list[UploadFile] = File(default=[]),
    runs: list[UploadFile] = File(default=[]),
    qrels: list[UploadFile] = File(default=[]),
    official: list[UploadFile] = File(default=[]),
    responses: list[UploadFile] = File(default=[]),
    user: CurrentUser = Depends(require("organizer")),
    session: Session = db,
) -> Response:
    """One transaction for all files: an error names file, line and field, and nothing is stored."""
    uploads = {
        "passages": passages,
        "queries": queries,
        "bank": bank,
        "runs": runs,
        "qrels": qrels,
        "official": official,
        "responses": responses,
    }
    with tempfile.TemporaryDirectory() as tmp:
        saved = {kind: [await _save(Path(tmp), f) for f in files if f.filename] for kind, files in uploads.items()}
        try:
            if not name.strip():
                raise ValueError("a collection needs a name")
            counts = import_files(session, service.ensure_collection(session, name.strip()), ImportFiles(**saved))
            session.commit()
        except (ImportFormatError, ValueError, LookupError) as error:
            session.rollback()
            return render(
                request,
                "collections.html",
                {"user": user, "collections": _summaries(session), "errors": [str(error)]},
                status=400,
            )
    request.session["flash"] = "imported: " + (", ".join(f"{n} {k}" for k, n in counts.items()) or "nothing new")
    return RedirectResponse(f"/c/{name.strip()}", status_code=303)


async def _save(directory: Path, upload: UploadFile) -> Path:
    target = directory / Path(upload.filename or "upload").name  # the name users see in error messages
    target.write_bytes(await upload.read())
    return target


def overview(session: Session, collection: Collection) -> dict[str, Any]:
    """Counts, judgment coverage, grading coverage per grader, rubric versions and recent jobs."""

    def count(statement: Any) -> int:
        return int(session.scalar(statement) or 0)

    in_collection = PoolEntry.query_pk.in_(select(Query.id).where(Query.collection_id == collection.id))
    pool = count(select(func.count()).select_from(PoolEntry).where(in_collection))
    judged = count(select(func.count(func.distinct(Judgment.pool_entry_pk))).join(PoolEntry).where(in_collection))
    graders = []
    for grader in graders_of(session, collection):
        graded = count(
            select(func.count(func.distinct(Grade.pool_entry_pk)))
            .join(PoolEntry)
            .where(in_collection, Grade.grader_pk == grader.id)
        )
        graders.append(
            {
                "label": describe_grader(grader),
                "model": grader.model,
                "prompt_class": grader.prompt_class,
                "passages": graded,
                "coverage": graded / pool if pool else 0.0,
            }
        )
    version = latest_version(session, collection)
    versions = session.scalars(
        select(RubricVersion)
        .where(RubricVersion.collection_id == collection.id)
        .order_by(RubricVersion.number.desc())
        .limit(10)
    )
    queries = session.execute(
        select(Query.query_id, Query.text).where(Query.collection_id == collection.id).order_by(Query.position)
    ).all()
    jobs = session.scalars(select(Job).where(Job.collection_id == collection.id).order_by(Job.id.desc()).limit(5))
    return {
        "name": collection.name,
        "pool": pool,
        "judged": judged,
        "judged_share": judged / pool if pool else 0.0,
        "graders": graders,
        "version": version.number if version else None,
        "versions": [
            {
                "number": v.number,
                "status": v.status,
                "by": v.created_by,
                "note": v.note,
                "at": v.created_at.strftime("%Y-%m-%d %H:%M"),
            }
            for v in versions
        ],
        "queries": [{"id": q, "text": t} for q, t in queries],
        "systems": count(select(func.count()).select_from(System).where(System.collection_id == collection.id)),
        "jobs": [{"id": j.id, "kind": j.kind, "state": j.state, "done": j.done, "total": j.total} for j in jobs],
    }


@router.get("/c/{name}")
def collection_page(
    name: str, request: Request, user: CurrentUser = Depends(require("viewer")), session: Session = db
) -> Response:
    collection = get_or_404(session, name)
    flash = request.session.pop("flash", None)
    return render(request, "collection.html", {"user": user, "c": overview(session, collection), "flash": flash})
