"""Jobs: launch grading (after an estimate), draft questions with an LLM, watch progress, cancel, history."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from fastapi import APIRouter, Depends, Form, Request
from fastapi import Path as PathParam
from fastapi.responses import RedirectResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.collections.schemas import ID_MAX, MODEL_MAX, NO_NUL, PROMPT_CLASS_MAX, QUERY_ID_MAX, SYSTEM_NAME_MAX
from app.config import get_settings
from app.errors import Invalid, NotFound
from app.grading.engine import CellScope
from app.grading.models import configured_models, model_for_label
from app.grading.prompts import prompt_class_names
from app.grading.service import (
    MAX_NEW_TOKENS_MAX,
    MAX_RETRIES_MAX,
    SEED_MAX,
    TIMEOUT_MAX,
    TIMEOUT_MIN,
    GraderSpec,
    plan_for,
    validate_spec,
)
from app.jobs import service
from app.jobs.launch import collection_grader, launch_grading, system_scope
from app.models import Collection, Job, JobBatch, Query, System
from app.web.deps import CurrentUser, db, render, require
from app.web.routes.collections import get_or_404
from app.web.security import path_for

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
class RunOptions:
    """How the model is asked (seed and output tokens: part of the grader's identity) and how
    patiently (timeout and retries of the openai backend: not part of it). Empty fields: defaults."""

    seed: int | None = None
    max_new_tokens: int | None = None
    timeout: float = 120.0
    max_retries: int = 6


@dataclass(frozen=True)
class LaunchForm:
    """The launch form's fields, shared by the estimate and the launch itself."""

    backend: str
    model: str
    prompt_class: str
    mode: str
    query_id: str
    system: str
    run: RunOptions = RunOptions()

    def spec(self) -> GraderSpec:
        return _spec(self.backend, self.model, self.prompt_class, self.mode, self.run)

    def fields(self) -> dict[str, Any]:
        """The form's fields as the estimate's hidden inputs carry them to the launch (None: empty)."""
        values = {k: v for k, v in asdict(self).items() if k != "run"} | asdict(self.run)
        return {k: "" if v is None else v for k, v in values.items()}


def launch_form(
    backend: str = Form("similarity", max_length=20),
    model: str = Form("", max_length=MODEL_MAX, pattern=NO_NUL),
    prompt_class: str = Form("Similarity", max_length=PROMPT_CLASS_MAX, pattern=NO_NUL),
    mode: str = Form("score", max_length=20),
    query_id: str = Form("", max_length=QUERY_ID_MAX, pattern=NO_NUL),
    system: str = Form("", max_length=SYSTEM_NAME_MAX, pattern=NO_NUL),
    seed: int | None = Form(None, ge=0, le=SEED_MAX),
    max_new_tokens: int | None = Form(None, ge=1, le=MAX_NEW_TOKENS_MAX),
    timeout: float = Form(120.0, ge=TIMEOUT_MIN, le=TIMEOUT_MAX),
    max_retries: int = Form(6, ge=0, le=MAX_RETRIES_MAX),
) -> LaunchForm:
    run = RunOptions(seed, max_new_tokens, timeout, max_retries)
    return LaunchForm(backend, model, prompt_class, mode, query_id, system, run)


def _spec(backend: str, model: str, prompt_class: str, mode: str, run: RunOptions) -> GraderSpec:
    """A validated grader from the form: the model is a configured label (or the backend's default)."""
    if backend not in ("similarity", "hf", "openai") or mode not in ("score", "generate"):
        raise Invalid("backend: similarity, hf or openai; mode: score or generate")
    if backend == "similarity" and prompt_class not in ("Similarity", "DirectSimilarity"):
        prompt_class = "Similarity"
    spec = GraderSpec(
        backend=backend,  # type: ignore[arg-type]
        model=model_for_label(model) if model else None,
        model_label=model or None,
        prompt_class=prompt_class,
        mode=mode,  # type: ignore[arg-type]
        **asdict(run),
    )
    validate_spec(spec)
    return spec


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
        "bounds": {
            "seed_max": SEED_MAX,
            "max_new_tokens_max": MAX_NEW_TOKENS_MAX,
            "timeout_min": TIMEOUT_MIN,
            "timeout_max": TIMEOUT_MAX,
            "max_retries_max": MAX_RETRIES_MAX,
        },
        "models": sorted(configured_models()),
        "estimate": None,
    }


@router.get("/c/{name}/jobs", name="jobs_page")
def jobs_page(
    name: str, request: Request, user: CurrentUser = Depends(require("viewer")), session: Session = db
) -> Response:
    collection = get_or_404(session, name)
    return render(request, "jobs.html", _page_context(session, collection, user))


@router.post("/c/{name}/jobs/estimate", name="estimate")
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
    cells = plan_for(session, collection, spec, None, _scope(session, collection, form.query_id, form.system))
    figures = service.estimate(session, spec, cells, get_settings().prices)
    context = _page_context(session, collection, user)
    context["estimate"] = {**figures.as_dict(), "form": form.fields()}
    return render(request, "jobs.html", context, block="estimate")


@router.post("/c/{name}/jobs", name="launch")
def launch(
    name: str,
    request: Request,
    form: LaunchForm = Depends(launch_form),
    user: CurrentUser = Depends(require("organizer")),
    session: Session = db,
) -> Response:
    collection = get_or_404(session, name)
    spec = form.spec()
    scope = _scope(session, collection, form.query_id, form.system)
    job = launch_grading(session, collection, spec, scope=scope, launched_by=user.name)
    return RedirectResponse(f"{path_for(request, 'jobs_page', name=name)}#job-{job.id}", status_code=303)


@router.post("/c/{name}/generate", name="generate")
def generate(
    name: str,
    request: Request,
    query_id: str = Form(...),
    kind: str = Form("questions"),
    style: str = Form("dl"),
    backend: str = Form("hf"),
    model: str = Form(""),
    user: CurrentUser = Depends(require("judge")),
    session: Session = db,
) -> Response:
    """ "Draft questions with the LLM": a drafting job; its items come back as a draft to accept or reject.

    The model is a label an organizer configured (``RUBRIC_MODELS``); a path never comes from here.
    """
    collection = get_or_404(session, name)
    if kind not in ("questions", "nuggets") or style not in ("dl", "car", "paper-dl", "paper-car"):
        raise Invalid("kind: questions or nuggets; style: dl, car, paper-dl or paper-car")
    if backend not in ("hf", "openai"):
        raise Invalid("backend: hf or openai")
    spec = GraderSpec(
        backend=backend,  # type: ignore[arg-type]
        model=model_for_label(model) if model else None,
        model_label=model or None,
        max_new_tokens=512,
    )
    job = service.launch_generation(
        session, collection, spec, kind=kind, style=style, query_ids=[query_id], launched_by=user.name
    )
    return RedirectResponse(f"{path_for(request, 'jobs_page', name=name)}#job-{job.id}", status_code=303)


def _job_or_404(session: Session, job_id: int) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound(f"no job {job_id}")
    return job


@router.post("/jobs/{job_id}/cancel", name="cancel")
def cancel(
    request: Request,
    job_id: int = PathParam(ge=1, le=ID_MAX),
    user: CurrentUser = Depends(require("organizer")),
    session: Session = db,
) -> Response:
    job = _job_or_404(session, job_id)
    service.cancel(session, job)
    collection = job.collection_id
    target = path_for(request, "jobs_page", name=session.get_one(Collection, collection).name)
    return RedirectResponse(str(target), status_code=303)


@router.get("/jobs/{job_id}", name="job_page")
def job_page(
    request: Request,
    job_id: int = PathParam(ge=1, le=ID_MAX),
    user: CurrentUser = Depends(require("viewer")),
    session: Session = db,
) -> Response:
    job = _job_or_404(session, job_id)
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
