"""Jobs: launch grading (after an estimate), draft questions with an LLM, watch progress, cancel, history."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from fastapi import APIRouter, Depends, Form, HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import get_settings
from app.grading.engine import CellScope
from app.grading.prompts import prompt_class_names
from app.grading.service import GraderSpec, plan_for
from app.jobs import service
from app.jobs.launch import collection_grader, launch_grading, system_scope
from app.models import Collection, Job, JobBatch, Query, System
from app.web.deps import CurrentUser, db, render, require
from app.web.routes.collections import get_or_404

router = APIRouter()


def job_row(job: Job) -> dict[str, Any]:
    grader = job.params.get("grader", {})
    return {
        "id": job.id,
        "kind": job.kind,
        "state": job.state,
        "by": job.launched_by,
        "total": job.total,
        "done": job.done,
        "cached": job.cached,
        "errors": job.errors,
        "model_calls": job.model_calls,
        "message": job.message,
        "created": job.created_at.strftime("%Y-%m-%d %H:%M:%S"),
        "grader": f"{grader.get('backend')} {grader.get('model') or ''} {grader.get('prompt_class')} "
        f"{grader.get('mode')}".strip(),
        "share": job.done / job.total if job.total else 1.0,
    }


@dataclass(frozen=True)
class LaunchForm:
    """The launch form's fields, shared by the estimate and the launch itself."""

    backend: str
    model: str
    prompt_class: str
    mode: str
    query_id: str
    system: str

    def spec(self) -> GraderSpec:
        return _spec(self.backend, self.model, self.prompt_class, self.mode)


def launch_form(
    backend: str = Form("similarity"),
    model: str = Form(""),
    prompt_class: str = Form("Similarity"),
    mode: str = Form("score"),
    query_id: str = Form(""),
    system: str = Form(""),
) -> LaunchForm:
    return LaunchForm(backend, model, prompt_class, mode, query_id, system)


def _spec(backend: str, model: str, prompt_class: str, mode: str) -> GraderSpec:
    if backend not in ("similarity", "hf", "openai") or mode not in ("score", "generate"):
        raise HTTPException(400, "backend: similarity, hf or openai; mode: score or generate")
    if backend == "similarity" and prompt_class not in ("Similarity", "DirectSimilarity"):
        prompt_class = "Similarity"
    return GraderSpec(backend=backend, model=model or None, prompt_class=prompt_class, mode=mode)  # type: ignore[arg-type]


def _scope(session: Session, collection: Any, query_id: str, system: str) -> CellScope:
    if system:
        return system_scope(session, collection, [system])
    return CellScope(query_ids=frozenset({query_id})) if query_id else CellScope()


def _page_context(session: Session, collection: Any, user: CurrentUser) -> dict[str, Any]:
    jobs = session.scalars(select(Job).where(Job.collection_id == collection.id).order_by(Job.id.desc()).limit(50))
    current = collection_grader(session, collection)
    return {
        "user": user,
        "collection": collection.name,
        "jobs": [job_row(j) for j in jobs],
        "prompt_classes": ["Similarity", "DirectSimilarity", *prompt_class_names()],
        "queries": list(
            session.scalars(select(Query.query_id).where(Query.collection_id == collection.id).order_by(Query.position))
        ),
        "systems": list(
            session.scalars(select(System.name).where(System.collection_id == collection.id).order_by(System.name))
        ),
        "current": current.as_dict(),
        "estimate": None,
    }


@router.get("/c/{name}/jobs")
def jobs_page(
    name: str, request: Request, user: CurrentUser = Depends(require("viewer")), session: Session = db
) -> Response:
    collection = get_or_404(session, name)
    return render(request, "jobs.html", _page_context(session, collection, user))


@router.post("/c/{name}/jobs/estimate")
def estimate(
    name: str,
    request: Request,
    form: LaunchForm = Depends(launch_form),
    user: CurrentUser = Depends(require("organizer")),
    session: Session = db,
) -> Response:
    """Before launch: prompts split into cached and new, time from measured throughput, tokens and cost."""
    collection = get_or_404(session, name)
    spec = form.spec()
    try:
        cells = plan_for(session, collection, spec, None, _scope(session, collection, form.query_id, form.system))
    except (LookupError, ValueError) as error:
        raise HTTPException(400, str(error)) from None
    figures = service.estimate(session, spec, cells, get_settings().prices)
    context = _page_context(session, collection, user)
    context["estimate"] = {**figures.as_dict(), "form": asdict(form)}
    return render(request, "jobs.html", context, block="estimate")


@router.post("/c/{name}/jobs")
def launch(
    name: str,
    form: LaunchForm = Depends(launch_form),
    user: CurrentUser = Depends(require("organizer")),
    session: Session = db,
) -> Response:
    collection = get_or_404(session, name)
    try:
        scope = _scope(session, collection, form.query_id, form.system)
        job = launch_grading(session, collection, form.spec(), scope=scope, launched_by=user.name)
    except (LookupError, ValueError) as error:
        raise HTTPException(400, str(error)) from None
    return RedirectResponse(f"/c/{name}/jobs#job-{job.id}", status_code=303)


@router.post("/c/{name}/generate")
def generate(
    name: str,
    query_id: str = Form(...),
    kind: str = Form("questions"),
    style: str = Form("dl"),
    backend: str = Form("hf"),
    model: str = Form(""),
    user: CurrentUser = Depends(require("judge")),
    session: Session = db,
) -> Response:
    """ "Draft questions with the LLM": a drafting job; its items come back as a draft to accept or reject."""
    collection = get_or_404(session, name)
    if kind not in ("questions", "nuggets") or style not in ("dl", "car", "paper-dl", "paper-car"):
        raise HTTPException(400, "kind: questions or nuggets; style: dl, car, paper-dl or paper-car")
    spec = GraderSpec(
        backend="openai" if backend == "openai" else "hf",
        model=model or None,
        max_new_tokens=512,
    )
    job = service.launch_generation(
        session, collection, spec, kind=kind, style=style, query_ids=[query_id], launched_by=user.name
    )
    return RedirectResponse(f"/c/{name}/jobs#job-{job.id}", status_code=303)


@router.post("/jobs/{job_id}/cancel")
def cancel(job_id: int, user: CurrentUser = Depends(require("organizer")), session: Session = db) -> Response:
    job = session.get(Job, job_id)
    if job is None:
        raise HTTPException(404, f"no job {job_id}")
    service.cancel(session, job)
    collection = job.collection_id
    return RedirectResponse(f"/c/{session.get_one(Collection, collection).name}/jobs", status_code=303)


@router.get("/jobs/{job_id}")
def job_page(
    job_id: int, request: Request, user: CurrentUser = Depends(require("viewer")), session: Session = db
) -> Response:
    job = session.get(Job, job_id)
    if job is None:
        raise HTTPException(404, f"no job {job_id}")
    errors = session.execute(
        select(JobBatch.number, JobBatch.error).where(JobBatch.job_pk == job_id, JobBatch.error.is_not(None))
    ).all()
    return render(
        request,
        "job.html",
        {
            "user": user,
            "job": job_row(job),
            "params": job.params,
            "collection": session.get_one(Collection, job.collection_id).name,
            "errors": [{"batch": n, "error": e} for n, e in errors],
        },
        block="progress" if request.headers.get("hx-request") == "true" else None,
    )
