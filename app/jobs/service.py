"""Jobs: launch (with an estimate), run batches idempotently, cancel, and sweep orphans.

The same ``execute_batch`` runs in a Celery worker (``worker/``) and in the embedded worker
(``app/jobs/embedded.py``). Writes are upserts on natural keys, so a redelivered batch is harmless.
Services never commit, except the batch runner, which owns its transactions as a task must.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app.collections.revision import upsert_grades
from app.db import after_commit
from app.grading.engine import Cell, GradingReport, cached_keys, ensure_method_grader, grade_batch
from app.grading.methods import GradingMethod, cache_key
from app.grading.prompts import CellInput
from app.grading.service import GraderSpec, build_method
from app.jobs.dispatch import dispatch_generation
from app.models import DIRECT_ITEM, BankItem, Collection, Job, JobBatch, Passage, PoolEntry, Query
from app.models.base import utcnow
from app.sqlutil import chunks

BATCH_CELLS = 32
MAX_ATTEMPTS = 3
ACTIVE = ("queued", "running")


@dataclass(frozen=True, slots=True)
class Estimate:
    prompts: int
    cached: int
    new: int
    seconds: float | None  # from the grader's measured throughput; None before its first batch
    tokens: int  # rough prompt tokens of the new cells (characters / 4)
    cost: float | None  # from the price table, for API backends

    def as_dict(self) -> dict[str, Any]:
        return {
            "prompts": self.prompts,
            "cached": self.cached,
            "new": self.new,
            "seconds": self.seconds,
            "tokens": self.tokens,
            "cost": self.cost,
        }


def estimate(session: Session, spec: GraderSpec, cells: Sequence[Cell], prices: dict[str, Any]) -> Estimate:
    """Split the cells into cached and new without loading any model, and price the new ones."""
    method = build_method(spec)
    keys = [cache_key(method, c.input) for c in cells]
    known = cached_keys(session, keys)
    unique = dict(zip(keys, cells, strict=True))
    new = [cell for key, cell in unique.items() if key not in known]
    cached = sum(1 for key in keys if key in known)
    tokens = sum(len(c.input.passage_text) + len(c.input.item_text) + 400 for c in new) // 4
    rate = throughput(session, spec)
    price = prices.get(spec.model_ref) if spec.backend == "openai" else None
    cost = (
        tokens / 1000 * float(price["input_per_1k"]) + len(new) * float(price.get("output_per_call", 0))
        if price
        else None
    )
    return Estimate(len(cells), cached, len(cells) - cached, len(new) / rate if rate else None, tokens, cost)


def throughput(session: Session, spec: GraderSpec) -> float | None:
    """Prompts per second measured on this grader's finished batches (model calls / seconds)."""
    rows = session.execute(
        select(JobBatch.model_calls, JobBatch.seconds, Job.params)
        .join(Job, Job.id == JobBatch.job_pk)
        .where(JobBatch.state == "done", JobBatch.model_calls > 0)
        .order_by(JobBatch.id.desc())
        .limit(200)
    ).all()
    wanted = spec.as_dict()
    mine = [r for r in rows if r.params.get("grader") == wanted and r.seconds]
    seconds = sum(r.seconds for r in mine)
    return sum(r.model_calls for r in mine) / seconds if seconds else None


def launch(
    session: Session,
    collection: Collection,
    spec: GraderSpec,
    cells: Sequence[Cell],
    *,
    kind: str = "grade",
    launched_by: str = "cli",
    rubric_version: int | None = None,
    batch_cells: int = BATCH_CELLS,
) -> Job:
    """A job row and its batches, handed to the workers once the caller's transaction commits."""
    job = Job(
        collection_id=collection.id,
        kind=kind,
        launched_by=launched_by,
        params={"grader": spec.as_dict(), "rubric_version": rubric_version},
        total=len(cells),
        state="queued" if cells else "done",
        finished_at=None if cells else utcnow(),
    )
    session.add(job)
    session.flush()
    session.add_all(
        JobBatch(job_pk=job.id, number=i, cells=[[c.pool_entry_pk, c.item_id] for c in batch])
        for i, batch in enumerate(chunks(list(cells), batch_cells))
    )
    session.flush()
    after_commit(session, partial(_start, job.id))
    return job


def _start(job_id: int) -> None:
    from app.jobs.launch import start  # launch builds on this module

    start(job_id)


def queued_batches(session: Session, job_id: int) -> list[int]:
    return list(session.scalars(select(JobBatch.id).where(JobBatch.job_pk == job_id, JobBatch.state == "queued")))


def cancel(session: Session, job: Job) -> None:
    """Stop at the next batch boundary: queued batches are never started; a running one finishes."""
    if job.state in ACTIVE:
        job.state = "cancelled"
        job.finished_at = utcnow()
        session.execute(
            update(JobBatch).where(JobBatch.job_pk == job.id, JobBatch.state == "queued").values(state="cancelled")
        )


def orphaned_batches(session: Session, stale_after: float) -> list[int]:
    """Batches of live jobs whose worker vanished (heartbeat older than ``stale_after`` s) → requeued."""
    cutoff = datetime.now(UTC) - timedelta(seconds=stale_after)
    stale = list(
        session.scalars(
            select(JobBatch.id)
            .join(Job, Job.id == JobBatch.job_pk)
            .where(Job.state.in_(ACTIVE), JobBatch.state.in_(ACTIVE), JobBatch.heartbeat_at < cutoff)
        )
    )
    if stale:
        session.execute(update(JobBatch).where(JobBatch.id.in_(stale)).values(state="queued", heartbeat_at=utcnow()))
    return stale


# ---- running a batch (worker side) ------------------------------------------------------------


@lru_cache(maxsize=4)
def _method(spec_key: str) -> GradingMethod:
    """One grading method (and model) per worker process and grader spec, loaded on first use."""
    import json

    return build_method(GraderSpec.from_dict(json.loads(spec_key)))


def method_for(spec: GraderSpec) -> GradingMethod:
    import json

    return _method(json.dumps(spec.as_dict(), sort_keys=True))


def cells_for(session: Session, job: Job, pairs: Sequence[Sequence[Any]]) -> list[Cell]:
    """Rebuild a batch's cells (texts included) from its stored ``[pool_entry_pk, item_id]`` pairs."""
    entry_pks = sorted({int(p[0]) for p in pairs})
    texts: dict[int, tuple[int, str, str]] = {}
    for batch in chunks(entry_pks):
        for entry_pk, query_pk, query_text, passage in session.execute(
            select(PoolEntry.id, Query.id, Query.text, Passage.text)
            .join(Query, Query.id == PoolEntry.query_pk)
            .join(Passage, Passage.id == PoolEntry.passage_pk)
            .where(PoolEntry.id.in_(batch))
        ).all():
            texts[entry_pk] = (query_pk, query_text, passage or "")
    item_ids = {str(p[1]) for p in pairs} - {DIRECT_ITEM}
    items = (
        {
            (item.query_pk, item.item_id): item
            for item in session.scalars(
                select(BankItem).where(BankItem.collection_id == job.collection_id, BankItem.item_id.in_(item_ids))
            )
        }
        if item_ids
        else {}
    )
    cells = []
    for position, (entry_pk, item_id) in enumerate(pairs):
        query_pk, query_text, passage = texts[int(entry_pk)]
        item = items.get((query_pk, item_id))
        gold = tuple(str(g) for g in (item.gold_answers or ())) if item else ()
        text = item.text if item else ""
        cells.append(Cell(int(entry_pk), str(item_id), position, CellInput(query_text, text, passage, gold)))
    return cells


def _claim(session: Session, batch_id: int) -> tuple[Job, JobBatch] | None:
    batch = session.get(JobBatch, batch_id)
    if batch is None or batch.state in ("done", "cancelled", "failed"):
        return None
    job = session.get_one(Job, batch.job_pk)
    if job.state == "cancelled":
        batch.state = "cancelled"
        return None
    batch.state, batch.heartbeat_at = "running", utcnow()
    batch.attempts += 1
    if job.state == "queued":
        job.state, job.started_at = "running", utcnow()
    return job, batch


def _record(batch: JobBatch, report: GradingReport, seconds: float) -> None:
    """``model_calls`` counts the cells sent to the model (not cached, not deduplicated)."""
    batch.state = "done"
    batch.done = report.done
    batch.cached = report.cached
    batch.errors = report.errors
    batch.model_calls = report.graded
    batch.seconds = seconds


def _fail(session: Session, job: Job, batch: JobBatch, method: GradingMethod, error: str) -> None:
    """After the last attempt every cell of the batch gets a grade row carrying the error."""
    grader_pk = ensure_method_grader(session, method)
    rows = [
        {"pool_entry_pk": int(e), "grader_pk": grader_pk, "item_id": str(i), "position": n, "error": error}
        for n, (e, i) in enumerate(batch.cells)
    ]
    upsert_grades(session, rows, update=["error"])
    batch.state, batch.error, batch.errors = "failed", error, len(rows)


def refresh_job(session: Session, job_id: int) -> Job:
    """Job counters from its batches (row-locked on PostgreSQL, so concurrent batches never race)."""
    locked = select(Job).where(Job.id == job_id).with_for_update().execution_options(populate_existing=True)
    job = session.scalars(locked).one()
    done_states = ("done", "failed")
    sums = session.execute(
        select(
            func.coalesce(func.sum(JobBatch.done), 0),
            func.coalesce(func.sum(JobBatch.cached), 0),
            func.coalesce(func.sum(JobBatch.errors), 0),
            func.coalesce(func.sum(JobBatch.model_calls), 0),
            func.count().filter(JobBatch.state.in_(ACTIVE)),
            func.count().filter(JobBatch.state == "failed"),
        ).where(JobBatch.job_pk == job_id, JobBatch.state.in_((*done_states, *ACTIVE)))
    ).one()
    job.done, job.cached, job.errors, job.model_calls = int(sums[0]), int(sums[1]), int(sums[2]), int(sums[3])
    if job.state in ACTIVE and sums[4] == 0:
        job.state = "failed" if sums[5] else "done"
        job.finished_at = utcnow()
    return job


def execute_batch(session: Session, batch_id: int, backoff: float = 1.0) -> Job | None:
    """Grade one batch: claim it, grade with retries and backoff, record. Commits (it is a task)."""
    claimed = _claim(session, batch_id)
    session.commit()
    if claimed is None:
        return None
    job, batch = claimed
    method = method_for(GraderSpec.from_dict(job.params["grader"]))
    for attempt in range(MAX_ATTEMPTS):
        try:
            cells = cells_for(session, job, batch.cells)
            start = time.perf_counter()
            report = grade_batch(session, method, ensure_method_grader(session, method), cells)
            _record(batch, report, time.perf_counter() - start)
            break
        except Exception as error:  # noqa: BLE001  any failure is retried, then recorded per cell
            session.rollback()
            session.info.pop("grader_pks", None)  # primary keys cached by ensure_grader were rolled back
            batch = session.get_one(JobBatch, batch_id)
            job = session.get_one(Job, batch.job_pk)
            if attempt == MAX_ATTEMPTS - 1:
                _fail(session, job, batch, method, f"{type(error).__name__}: {error}")
            else:
                batch.heartbeat_at = utcnow()
                session.commit()
                time.sleep(backoff * 2**attempt)
    session.commit()
    job = refresh_job(session, batch.job_pk)
    session.commit()
    return job


# ---- test-bank drafting jobs ------------------------------------------------------------------


def launch_generation(
    session: Session,
    collection: Collection,
    spec: GraderSpec,
    *,
    kind: str,
    style: str,
    query_ids: list[str],
    launched_by: str,
) -> Job:
    """A job that drafts items with an LLM into a draft rubric version (one unit of work per query)."""
    job = Job(
        collection_id=collection.id,
        kind="generate",
        launched_by=launched_by,
        params={"grader": spec.as_dict(), "kind": kind, "style": style, "query_ids": query_ids},
        total=len(query_ids),
    )
    session.add(job)
    session.flush()
    after_commit(session, partial(dispatch_generation, job.id))
    return job


def execute_generation(session: Session, job_id: int) -> Job:
    """Run a drafting job (commits, as a task does); failures are recorded per query in the message."""
    from app.grading.service import build_backend
    from app.rubrics.generation import draft_bank

    job = session.get_one(Job, job_id)
    if job.state != "queued":
        return job
    job.state, job.started_at = "running", utcnow()
    session.commit()
    params = job.params
    try:
        report = draft_bank(
            session,
            session.get_one(Collection, job.collection_id),
            build_backend(GraderSpec.from_dict(params["grader"])),
            kind=params["kind"],
            style=params["style"],
            query_ids=params["query_ids"],
            created_by=job.launched_by,
        )
        job.done, job.errors = job.total - len(report.failures), len(report.failures)
        job.message = f"draft version {report.version_number}: {report.items} items" if report.version_number else ""
        job.message += "".join(f"; {q}: {why}" for q, why in report.failures.items())
        job.state = "done" if report.version_number else "failed"
    except Exception as error:  # noqa: BLE001  the job row says what went wrong
        session.rollback()
        job = session.get_one(Job, job_id)
        job.state, job.message = "failed", f"{type(error).__name__}: {error}"
    job.finished_at = utcnow()
    session.commit()
    return job
