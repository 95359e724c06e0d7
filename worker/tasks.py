"""Celery tasks: thin wrappers that take ids and call the same code as the embedded worker."""

from __future__ import annotations

from app.config import get_settings
from app.db import session_scope
from app.jobs.events import after_batch, after_generation
from app.jobs.launch import sweep_orphans
from app.jobs.service import execute_batch, execute_generation
from worker.celery_app import app


@app.task(name="grading.grade_cells")
def grade_cells(batch_id: int) -> None:
    """Grade one batch of cells (idempotent: a finished batch is skipped, rows are upserts)."""
    with session_scope() as session:
        job = execute_batch(session, batch_id)
        if job is not None:
            after_batch(session, job)


@app.task(name="jobs.sweep")
def sweep() -> list[int]:
    """Requeue the batches of live jobs whose worker stopped sending heartbeats; retry refused deliveries."""
    return sweep_orphans(get_settings().job_stale_seconds)


@app.task(name="banks.generate")
def generate(job_id: int) -> None:
    """Draft test-bank items with an LLM into a draft rubric version."""
    with session_scope() as session:
        after_generation(execute_generation(session, job_id))
