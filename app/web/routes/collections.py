"""Collections: the list, the import form (organizers) and the overview page."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from app.collections import service
from app.collections.errors import ImportFormatError
from app.collections.graders import grader_coverage, set_primary_grader
from app.collections.importing import ImportFiles, import_into
from app.collections.naming import follows_rule, rename_command
from app.collections.schemas import INT32_MAX
from app.collections.summaries import collection_summaries
from app.errors import DomainError, Invalid
from app.models import Collection, Job, Judgment, PoolEntry, Query, RubricVersion, System
from app.rubrics.service import latest_version
from app.web import grader_view
from app.web.deps import CurrentUser, db, render, require
from app.web.security import AnyText, path_for
from app.web.uploads import ReceivedForm, receive_form

router = APIRouter()


def get_or_404(session: Session, name: str) -> Collection:
    """The named collection; ``CollectionNotFound`` is a ``NotFound``, which app/web/errors.py answers with 404."""
    return service.get_collection(session, name)


@router.get("/", name="collections_page")
def collections_page(
    request: Request, user: CurrentUser = Depends(require("viewer")), session: Session = db
) -> Response:
    return render(request, "collections.html", {"user": user, "collections": _summaries(session), "errors": []})


def _summaries(session: Session) -> list[dict[str, Any]]:
    """One row per collection; one stored before the naming rule gets no link but its rename command."""
    return [
        {
            "name": n,
            "queries": q,
            "passages": p,
            "systems": s,
            "rename_command": None if follows_rule(n) else rename_command(n),
        }
        for n, q, p, s in collection_summaries(session.connection())
    ]


@router.post("/collections/import", name="import_collection")
async def import_collection(
    request: Request, user: CurrentUser = Depends(require("organizer")), session: Session = db
) -> Response:
    """One transaction for all files: an error names the user's file, line and field; nothing is stored.

    The role (here) and CSRF (``csrf_protect``, from the header or the URL) are checked before a
    byte of the body is read, which is why this route declares no Form/File parameters. The body
    is bounded while it streams (``app.web.uploads``); the import runs in a worker thread in its
    own transaction, so the event loop keeps answering other requests.
    """
    with tempfile.TemporaryDirectory(prefix="rubric-upload-") as tmp:
        form = await receive_form(request, Path(tmp), IMPORT_KINDS)
        files = ImportFiles(**{kind: form.paths(kind) for kind in IMPORT_KINDS - {"judgments"}})
        # another judge's graded qrels: named by the form's judge field, else by the file's name
        judge = form.fields.get("judge", "").strip()
        files.judgments_from = [(judge or f.name.split(".")[0], f.path) for f in form.files if f.field == "judgments"]
        try:
            name = _collection_name(form.fields.get("name", ""))
            counts = await run_in_threadpool(import_into, name, files)
        except (ImportFormatError, DomainError) as error:
            status = error.status if isinstance(error, DomainError) else 400
            refusal = ImportRefusal(
                form.in_users_words(str(error)), form.fields.get("name", "")[:COLLECTION_NAME_MAX], _rechoose(form)
            )
            return await _import_refused(request, user, session, refusal, status)
    request.session["flash"] = "imported: " + (", ".join(f"{n} {k}" for k, n in counts.items()) or "nothing new")
    return RedirectResponse(str(path_for(request, "collection_page", name=name)), status_code=303)


IMPORT_KINDS = frozenset(
    {"passages", "queries", "bank", "runs", "qrels", "official", "responses", "requests", "nuggets", "reports"}
    | {"judgments"}
)
# the import form's file fields in form order, with their labels (the page says which ones to choose again)
IMPORT_FIELDS = (
    ("passages", "Passages"),
    ("queries", "Queries"),
    ("bank", "Test banks"),
    ("runs", "Run files"),
    ("qrels", "Qrels"),
    ("official", "Official leaderboard"),
    ("responses", "Generated responses"),
    ("requests", "AutoJudge requests"),
    ("nuggets", "Nugget banks"),
    ("reports", "AutoJudge reports"),
    ("judgments", "Another judge's qrels"),
)
COLLECTION_NAME_MAX = 200  # Collection.name is String(200)


def _collection_name(raw: str) -> str:
    name = raw.strip()
    if not name:
        raise Invalid("a collection needs a name")
    if len(name) > COLLECTION_NAME_MAX or not name.isprintable():
        raise Invalid(f"a collection name is at most {COLLECTION_NAME_MAX} printable characters")
    return name


@dataclass(frozen=True, slots=True)
class ImportRefusal:
    """What the refused form shows again: the error, the typed name, and the files to choose again
    (a browser never refills a file input): (field label, the file names the user had chosen)."""

    message: str
    name: str
    rechoose: tuple[tuple[str, tuple[str, ...]], ...]


def _rechoose(form: ReceivedForm) -> tuple[tuple[str, tuple[str, ...]], ...]:
    chosen = {kind: tuple(f.name for f in form.files if f.field == kind) for kind, _ in IMPORT_FIELDS}
    return tuple((label, chosen[kind]) for kind, label in IMPORT_FIELDS if chosen[kind])


async def _import_refused(
    request: Request, user: CurrentUser, session: Session, refusal: ImportRefusal, status: int
) -> Response:
    """The collections page again, with the refusal next to the form (the import's own transaction rolled back)."""
    collections = await run_in_threadpool(_summaries, session)
    context = {"user": user, "collections": collections, "errors": [], "refusal": refusal}
    return render(request, "collections.html", context, status=status)


def overview(session: Session, collection: Collection) -> dict[str, Any]:
    """Counts, judgment coverage, grading coverage per grader, rubric versions and recent jobs."""

    def count(statement: Any) -> int:
        return int(session.scalar(statement) or 0)

    in_collection = PoolEntry.query_pk.in_(select(Query.id).where(Query.collection_id == collection.id))
    pool = count(select(func.count()).select_from(PoolEntry).where(in_collection))
    judged = count(select(func.count(func.distinct(Judgment.pool_entry_pk))).join(PoolEntry).where(in_collection))
    coverage = grader_coverage(session, collection)
    options, _ = grader_view.choices(session, collection, None, coverage)
    graders = [{**o, "fraction": c.fraction} for o, c in zip(options, coverage, strict=True)]
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
        "primary_set": collection.primary_grader_id is not None,
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


@router.get("/c/{name}", name="collection_page")
def collection_page(
    name: str, request: Request, user: CurrentUser = Depends(require("viewer")), session: Session = db
) -> Response:
    collection = get_or_404(session, name)
    flash = request.session.pop("flash", None)
    c = overview(session, collection)
    links = _query_links(request, collection.name, [q["id"] for q in c["queries"]])
    c["queries"] = [{**q, **link} for q, link in zip(c["queries"], links, strict=True)]
    return render(request, "collection.html", {"user": user, "c": c, "flash": flash})


_QUERY_SLOT = "QUERY-ID-SLOT"  # plain characters: the path convertor writes them as they are


def _query_links(request: Request, name: str, query_ids: list[str]) -> list[dict[str, str]]:
    """Each query's rubric, grid and review links, with one route look-up per kind instead of one per
    link: at 5× DL the page lists 270 queries, and 810 look-ups took longer than the rest of the page."""
    rubric = str(path_for(request, "rubric_page", name=name, query_id=_QUERY_SLOT)).rpartition(_QUERY_SLOT)
    grid = str(path_for(request, "grid_page", name=name, query_id=_QUERY_SLOT)).rpartition(_QUERY_SLOT)
    review = path_for(request, "review_page", name=name)
    to_path = AnyText().to_string
    return [
        {
            "rubric_url": rubric[0] + to_path(q) + rubric[2],
            "grid_url": grid[0] + to_path(q) + grid[2],
            "review_url": str(review.include_query_params(query=q)),
        }
        for q in query_ids
    ]


@router.post("/c/{name}/primary-grader", name="set_primary_grader")
def set_primary_grader_route(
    name: str,
    request: Request,
    grader: int = Form(..., ge=0, le=INT32_MAX),  # 0: no choice, the most complete grader
    user: CurrentUser = Depends(require("organizer")),
    session: Session = db,
) -> Response:
    """Set the grader every page defaults to and rubric-edit regrades use (app/collections/graders.py)."""
    collection = get_or_404(session, name)
    chosen = set_primary_grader(session, collection, grader or None)
    request.session["flash"] = (
        f"primary grader: {chosen.model} / {chosen.prompt_class}" if chosen else "primary grader: the most complete one"
    )
    return RedirectResponse(str(path_for(request, "collection_page", name=name)), status_code=303)
