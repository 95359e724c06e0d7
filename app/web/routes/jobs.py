"""Jobs: launch grading (after an estimate), draft questions with an LLM, watch progress, cancel, history."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, Form, HTTPException, Request
from fastapi import Path as PathParam
from fastapi.responses import RedirectResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.collections.schemas import ID_MAX, MODEL_MAX, NO_NUL, PROMPT_CLASS_MAX, QUERY_ID_MAX, SYSTEM_NAME_MAX
from app.config import get_settings
from app.errors import Conflict, Invalid, NotFound
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
from app.jobs.launch import collection_grader, system_scope
from app.models import Collection, Job, JobBatch, Query, System
from app.web.deps import CurrentUser, db, render, require
from app.web.routes.collections import get_or_404
from app.web.security import path_for

router = APIRouter()


LIVE = ("queued", "running")
BASE_URL_MAX = 2000


def job_row(job: Job, user: CurrentUser | None = None, now: datetime | None = None) -> dict[str, Any]:
    """One job as the list and the job page show it: what it does, how far, how long left, who may stop it."""
    processed = min(job.total, job.done + job.errors)
    live = job.state in LIVE
    return {
        "id": job.id,
        "kind": job.kind,
        "what": _what(job),
        "state": job.state,
        "live": live,
        "by": job.launched_by,
        "total": job.total,
        "done": job.done,
        "cached": job.cached,
        "errors": job.errors,
        "model_calls": job.model_calls,
        "message": job.message,
        "created": job.created_at.strftime("%Y-%m-%d %H:%M:%S"),
        "grader": _grader_text(job),
        "share": processed / job.total if job.total else 1.0,
        "percent": round(100 * processed / job.total) if job.total else 100,
        "eta": _eta(job, processed, now or datetime.now(UTC)) if live else None,
        "can_cancel": live and user is not None and may_cancel(user, job),
    }


def _grader_text(job: Job) -> str:
    """backend, model, prompt class (a similarity grader has none but Direct) and mode."""
    spec = GraderSpec.from_dict(job.params.get("grader", {}))
    if job.kind == "generate":
        return f"{spec.backend} {spec.model_name}"
    shown = spec.backend != "similarity" or spec.prompt_class in ("DirectSimilarity", "NuggetSimilarity")
    prompt = spec.prompt_class if shown else ""
    return " ".join(part for part in (spec.backend, spec.model_name, prompt, spec.mode) if part)


def _what(job: Job) -> str:
    """A drafting job says what it drafts, for which queries, with which model; a grading job, its kind."""
    if job.kind != "generate":
        return {"grade": "grading", "regrade": "regrading after a rubric edit"}.get(job.kind, job.kind)
    grader = GraderSpec.from_dict(job.params.get("grader", {}))
    queries = ", ".join(job.params.get("query_ids", [])) or "no query"
    return f"draft {job.params.get('kind', 'questions')} for {queries} with {grader.model_name}"


def _eta(job: Job, processed: int, now: datetime) -> str | None:
    """Time left at the job's own pace so far: (total − processed) × elapsed / processed."""
    if job.started_at is None or processed <= 0 or processed >= job.total:
        return None
    started = job.started_at if job.started_at.tzinfo else job.started_at.replace(tzinfo=UTC)
    elapsed = max((now - started).total_seconds(), 0.0)
    return about_left(elapsed * (job.total - processed) / processed)


def about_left(seconds: float) -> str:
    """ "about 2 min left": rounded the way a person reads a clock."""
    return f"{about(seconds)} left"


def about(seconds: float) -> str:
    if seconds < 60:
        return f"about {max(5, round(seconds / 5) * 5)} s"
    if seconds < 3600:
        return f"about {round(seconds / 60)} min"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"about {hours} h {minutes} min" if minutes else f"about {hours} h"


def speed(cells_per_second: float) -> str:
    """The measured speed the way it reads best: cells per second, or seconds per cell when slow."""
    if cells_per_second >= 1:
        return f"{cells_per_second:,.1f} cells/s"
    return f"{1 / cells_per_second:,.1f} s per cell"


def may_cancel(user: CurrentUser, job: Job) -> bool:
    """Organizers stop any job; the judge who launched a job (a drafting job) stops their own."""
    return user.can("organizer") or (user.can("judge") and job.launched_by == user.name)


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
    if backend == "similarity" and prompt_class not in ("Similarity", "DirectSimilarity", "NuggetSimilarity"):
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
        "jobs": [job_row(j, user) for j in jobs],
        "prompt_classes": ["Similarity", "DirectSimilarity", "NuggetSimilarity", *prompt_class_names()],
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
    context["estimate"] = {
        **figures.as_dict(),
        "form": form.fields(),
        "time_text": about(figures.seconds).capitalize() if figures.seconds is not None else None,
        "speed_text": speed(figures.cells_per_second) if figures.cells_per_second else None,
    }
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
    cells = plan_for(session, collection, spec, None, _scope(session, collection, form.query_id, form.system))
    figures = service.estimate(session, spec, cells, {})
    if figures.nothing_to_grade:
        raise Conflict(
            "nothing to grade: every cell is cached" if cells else "nothing to grade: this scope has no cells"
        )
    job = service.launch(session, collection, spec, cells, launched_by=user.name)
    return RedirectResponse(f"{path_for(request, 'jobs_page', name=name)}#job-{job.id}", status_code=303)


@router.post("/c/{name}/generate", name="generate")
def generate(
    name: str,
    request: Request,
    query_id: str = Form(..., max_length=QUERY_ID_MAX, pattern=NO_NUL),
    kind: str = Form("questions", max_length=20),
    style: str = Form("dl", max_length=20),
    backend: str = Form("hf", max_length=20),
    model: str = Form("", max_length=MODEL_MAX, pattern=NO_NUL),  # blank reaches the check below: a 400 saying why
    base_url: str = Form("", max_length=BASE_URL_MAX, pattern=NO_NUL),
    user: CurrentUser = Depends(require("judge")),
    session: Session = db,
) -> Response:
    """ "Draft questions with the LLM": a drafting job; its items come back as a draft to accept or reject.

    The model is a label an organizer configured (``RUBRIC_MODELS``); a path never comes from here.
    The openai backend may name its server (``base_url``: http or https, nothing else).
    """
    collection = get_or_404(session, name)
    if kind not in ("questions", "nuggets") or style not in ("dl", "car", "paper-dl", "paper-car"):
        raise Invalid("kind: questions or nuggets; style: dl, car, paper-dl or paper-car")
    if backend not in ("hf", "openai"):
        raise Invalid("backend: hf or openai")
    if not model.strip():
        raise Invalid("model: choose the model that drafts the questions")
    spec = GraderSpec(
        backend=backend,  # type: ignore[arg-type]
        model=model_for_label(model),
        model_label=model,
        max_new_tokens=512,
        base_url=drafting_base_url(base_url) if backend == "openai" else None,
    )
    job = service.launch_generation(
        session, collection, spec, kind=kind, style=style, query_ids=[query_id], launched_by=user.name
    )
    return RedirectResponse(f"{path_for(request, 'jobs_page', name=name)}#job-{job.id}", status_code=303)


def drafting_base_url(text: str) -> str | None:
    """The openai server's base URL: blank for the configured default, else an http(s) URL with a host."""
    text = text.strip()
    if not text:
        return None
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018  raises ValueError on a port out of range
    except ValueError:
        raise Invalid("base URL: not a URL; give e.g. http://localhost:8000/v1") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Invalid("base URL: give an http:// or https:// URL with a host, e.g. http://localhost:8000/v1")
    if parts.username or parts.password:
        raise Invalid("base URL: no user name or password in the URL")
    return text


def _job_or_404(session: Session, job_id: int) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound(f"no job {job_id}")
    return job


@router.post("/jobs/{job_id}/cancel", name="cancel")
def cancel(
    request: Request,
    job_id: int = PathParam(ge=1, le=ID_MAX),
    back: str = Form("jobs", pattern="^(jobs|job)$"),  # where the form was: the list or the job's page
    user: CurrentUser = Depends(require("judge")),
    session: Session = db,
) -> Response:
    """Organizers cancel any job; a judge cancels the jobs they launched (their drafting jobs)."""
    job = _job_or_404(session, job_id)
    if not may_cancel(user, job):
        raise HTTPException(status_code=403, detail="only an organizer or the judge who launched it can cancel it")
    service.cancel(session, job, by=user.name)
    if back == "job":
        return RedirectResponse(str(path_for(request, "job_page", job_id=job.id)), status_code=303)
    collection = session.get_one(Collection, job.collection_id).name
    return RedirectResponse(f"{path_for(request, 'jobs_page', name=collection)}#job-{job.id}", status_code=303)


class ViewedJob(NamedTuple):
    job: Job
    user: CurrentUser


def viewed_job(
    job_id: int = PathParam(ge=1, le=ID_MAX),
    user: CurrentUser = Depends(require("viewer")),
    session: Session = db,
) -> ViewedJob:
    """The job a viewer's GET names in its path (404 if none), and the viewer: the role is checked
    first (dependencies before parameters), so a visitor who may not view learns nothing of the job."""
    return ViewedJob(_job_or_404(session, job_id), user)


@router.get("/jobs/{job_id}/row", name="job_row")
def job_row_fragment(request: Request, viewed: ViewedJob = Depends(viewed_job)) -> Response:
    """One row of the jobs list, re-fetched on the job's own event: its final event swaps in the final row."""
    job, user = viewed
    return render(request, "jobs.html", {"user": user, "j": job_row(job, user)}, block="job_row")


@router.get("/jobs/{job_id}", name="job_page")
def job_page(request: Request, viewed: ViewedJob = Depends(viewed_job), session: Session = db) -> Response:
    job, user = viewed
    fragment = request.headers.get("hx-request") == "true"
    return _job_page(request, session, job, user, block="progress" if fragment else None)


def _job_page(request: Request, session: Session, job: Job, user: CurrentUser, block: str | None) -> Response:
    errors = session.execute(
        select(JobBatch.number, JobBatch.error).where(JobBatch.job_pk == job.id, JobBatch.error.is_not(None))
    ).all()
    return render(
        request,
        "job.html",
        {
            "user": user,
            "job": job_row(job, user),
            "params": job.params,
            "collection": session.get_one(Collection, job.collection_id).name,
            "errors": [{"batch": n, "error": e} for n, e in errors],
        },
        block=block,
    )
