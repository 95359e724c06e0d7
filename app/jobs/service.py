"""Jobs: launch (with an estimate), run batches idempotently, cancel, and sweep orphans.

The same ``execute_batch`` runs in a Celery worker (``worker/``) and in the embedded worker
(``app/jobs/embedded.py``). Writes are upserts on natural keys, so a redelivered batch is harmless.
Services never commit, except the batch runner, which owns its transactions as a task must.

Liveness: a running batch is stamped by a heartbeat thread every ``job_heartbeat_seconds``, and the
sweep requeues one whose stamp is older than ``job_stale_seconds``; a claim is one conditional
UPDATE, so a redelivered message never grades a batch that another live worker holds; a batch
claimed more than ``job_max_claims`` times is failed. Model calls run with no open transaction.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache, partial
from typing import Any

from sqlalchemy import Engine, and_, func, or_, select, update
from sqlalchemy.orm import Session

from app.collections.revision import upsert_grades
from app.config import get_settings
from app.db import after_commit, session_scope
from app.grading.engine import (
    Cell,
    GradingReport,
    cached_keys,
    compute_batch,
    ensure_method_grader,
    prepare_batch,
    store_batch,
)
from app.grading.failures import CELL_LOCAL, NOT_SENT, ErrorSummary
from app.grading.methods import GradingMethod, cache_key
from app.grading.preflight import PreflightFailed, preflight_method
from app.grading.prompts import CellInput
from app.grading.service import GraderSpec, build_method, public_error, validate_generator, validate_spec
from app.jobs.events import announce_cancel, announce_launch, in_batch_publisher
from app.models import DIRECT_ITEM, BankItem, Collection, Job, JobBatch, Passage, PoolEntry, Query
from app.models.base import utcnow
from app.sqlutil import chunks

BATCH_CELLS = 32
MAX_ATTEMPTS = 3
ACTIVE = ("queued", "running")
# Job.message while its batches wait for a broker that refused them; the sweep retries those.
UNDELIVERED = "queued; no worker reachable, retrying"
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Estimate:
    prompts: int
    cached: int
    new: int
    seconds: float | None  # from the grader's measured throughput; None before its first batch
    tokens: int | None  # rough prompt tokens of the new cells (characters / 4); None: the grader sends no prompt
    cost: float | None  # from the price table, for API backends
    cells_per_second: float | None = None  # the measured speed behind ``seconds``

    @property
    def nothing_to_grade(self) -> bool:
        return self.new == 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "prompts": self.prompts,
            "cached": self.cached,
            "new": self.new,
            "seconds": self.seconds,
            "tokens": self.tokens,
            "cost": self.cost,
            "cells_per_second": self.cells_per_second,
            "nothing_to_grade": self.nothing_to_grade,
        }


def estimate(session: Session, spec: GraderSpec, cells: Sequence[Cell], prices: dict[str, Any]) -> Estimate:
    """Split the cells into cached and new without loading any model, and price the new ones.

    Time: new cells / the grader's measured cells per second (``throughput``). Prompt tokens,
    ≈ (passage + item + 400 characters of template) / 4 per new cell, only for graders that send a
    prompt to a language model: a similarity grader embeds texts and has no prompt to count.
    """
    validate_spec(spec)
    method = build_method(spec)
    keys = [cache_key(method, c.input) for c in cells]
    known = cached_keys(session, keys)
    unique = dict(zip(keys, cells, strict=True))
    new = [cell for key, cell in unique.items() if key not in known]
    cached = sum(1 for key in keys if key in known)
    prompted = spec.backend in ("hf", "openai")
    tokens = sum(len(c.input.passage_text) + len(c.input.item_text) + 400 for c in new) // 4 if prompted else None
    rate = throughput(session, spec)
    price = prices.get(spec.model_ref) if spec.backend == "openai" else None
    cost = (
        (tokens or 0) / 1000 * float(price["input_per_1k"]) + len(new) * float(price.get("output_per_call", 0))
        if price
        else None
    )
    seconds = len(new) / rate if rate else None
    return Estimate(len(cells), cached, len(cells) - cached, seconds, tokens, cost, rate)


def _grader_identity(spec: GraderSpec) -> tuple[Any, ...]:
    """What makes two specs the same grader for speed: model and prompt, not timeouts or retries."""
    prompt = None if spec.backend == "similarity" else (spec.prompt_class, spec.custom_prompt)
    return (spec.backend, spec.model_ref, spec.mode, prompt, spec.seed, spec.max_new_tokens, spec.base_url)


def throughput(session: Session, spec: GraderSpec) -> float | None:
    """Cells per second measured on this grader's finished batches: cells sent to the model / seconds.

    The newest 200 batches that called the model; a grader is matched by what it grades with
    (``_grader_identity``), so a run with another timeout or batch size counts for the same grader.
    """
    rows = session.execute(
        select(JobBatch.model_calls, JobBatch.seconds, Job.params)
        .join(Job, Job.id == JobBatch.job_pk)
        .where(JobBatch.state == "done", JobBatch.model_calls > 0, JobBatch.seconds > 0)
        .order_by(JobBatch.id.desc())
        .limit(200)
    ).all()
    wanted = _grader_identity(spec)
    mine = [r for r in rows if _grader_identity(GraderSpec.from_dict(r.params.get("grader", {}))) == wanted]
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
    validate_spec(spec)
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
    announce_launch(session, job)
    after_commit(session, partial(_start, job.id))
    return job


def _start(job_id: int) -> None:
    from app.jobs.launch import start  # launch builds on this module

    start(job_id)


def queued_batches(session: Session, job_id: int) -> list[int]:
    return list(session.scalars(select(JobBatch.id).where(JobBatch.job_pk == job_id, JobBatch.state == "queued")))


def cancel(session: Session, job: Job, by: str | None = None) -> None:
    """Stop at the next batch boundary: queued batches are never started; a running one finishes.

    ``by`` names who cancelled, on the job's message (the page says why it stopped)."""
    if job.state in ACTIVE:
        job.state = "cancelled"
        job.finished_at = utcnow()
        if by is not None:
            job.message = f"cancelled by {by}"
        announce_cancel(session, job)
        session.execute(
            update(JobBatch).where(JobBatch.job_pk == job.id, JobBatch.state == "queued").values(state="cancelled")
        )


def orphaned_batches(session: Session, stale_after: float) -> list[int]:
    """Running batches of live jobs whose heartbeat is older than ``stale_after`` s → queued again.

    Only running batches: a queued one is waiting in the broker (or was never delivered, which
    ``undelivered_batches`` covers), and requeueing it would only duplicate its message.
    """
    cutoff = datetime.now(UTC) - timedelta(seconds=stale_after)
    stale = list(
        session.scalars(
            select(JobBatch.id)
            .join(Job, Job.id == JobBatch.job_pk)
            .where(Job.state.in_(ACTIVE), JobBatch.state == "running", JobBatch.heartbeat_at < cutoff)
        )
    )
    if stale:
        session.execute(
            update(JobBatch)
            .where(JobBatch.id.in_(stale), JobBatch.state == "running", JobBatch.heartbeat_at < cutoff)
            .values(state="queued", heartbeat_at=utcnow())
            .execution_options(synchronize_session=False)
        )
    return stale


def queued_of_live_jobs(session: Session, only_undelivered: bool) -> list[int]:
    """Queued batches of live jobs; with ``only_undelivered``, those of jobs the broker refused."""
    query = (
        select(JobBatch.id)
        .join(Job, Job.id == JobBatch.job_pk)
        .where(Job.state.in_(ACTIVE), JobBatch.state == "queued")
        .order_by(JobBatch.id)
    )
    if only_undelivered:
        query = query.where(Job.message == UNDELIVERED)
    return list(session.scalars(query))


@dataclass(frozen=True, slots=True)
class Delivery:
    """Batches sorted by what runs them: grading batches, and drafting jobs (one batch each)."""

    grading: list[int]
    drafting: dict[int, int]  # batch id → its drafting job
    job_ids: list[int]

    @property
    def drafting_jobs(self) -> list[int]:
        return sorted(set(self.drafting.values()))


def delivery_for(session: Session, batch_ids: Sequence[int]) -> Delivery:
    rows = session.execute(
        select(JobBatch.id, Job.id, Job.kind).join(Job, Job.id == JobBatch.job_pk).where(JobBatch.id.in_(batch_ids))
    ).all()
    grading = [b for b, _, kind in rows if kind != "generate"]
    drafting = {b: j for b, j, kind in rows if kind == "generate"}
    return Delivery(grading, drafting, sorted({j for _, j, _ in rows}))


def mark_delivery(session: Session, job_ids: Sequence[int], delivered: bool) -> None:
    """Record on live jobs whether their batches reached a worker (the sweep retries those that did not)."""
    if not job_ids:
        return
    live = update(Job).where(Job.id.in_(job_ids), Job.state.in_(ACTIVE)).execution_options(synchronize_session=False)
    if delivered:
        session.execute(live.where(Job.message == UNDELIVERED).values(message=""))
    else:
        session.execute(live.where(Job.message != UNDELIVERED).values(message=UNDELIVERED))


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


def _claim(session: Session, batch_id: int) -> JobBatch | None:
    """Take a batch: a queued one, or a running one whose worker stopped heartbeating.

    One conditional UPDATE, so of two deliveries of the same batch (a sweep's and the broker's
    redelivery of a dead worker's message) only one grades it; the other is skipped here.
    """
    batch = session.get(JobBatch, batch_id)
    if batch is None or batch.state not in ACTIVE:
        return None
    job = session.get_one(Job, batch.job_pk)
    if job.state == "cancelled":
        batch.state = "cancelled"
        return None
    cutoff = datetime.now(UTC) - timedelta(seconds=get_settings().job_stale_seconds)
    claimable = or_(JobBatch.state == "queued", and_(JobBatch.state == "running", JobBatch.heartbeat_at < cutoff))
    claimed = session.execute(
        update(JobBatch)
        .where(JobBatch.id == batch_id, claimable)
        .values(state="running", heartbeat_at=utcnow(), attempts=JobBatch.attempts + 1)
        .execution_options(synchronize_session=False)
    )
    if claimed.rowcount != 1:  # type: ignore[attr-defined]
        return None
    session.refresh(batch)
    if job.state == "queued":
        job.state, job.started_at = "running", utcnow()
    return batch


@contextmanager
def heartbeat(session: Session, batch_id: int) -> Iterator[None]:
    """While the body runs, a thread stamps the batch every ``job_heartbeat_seconds`` in its own short
    transactions, so the sweep tells a dead worker from a long batch whatever the batch length."""
    engine = session.get_bind()
    assert isinstance(engine, Engine)
    interval = get_settings().job_heartbeat_seconds
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(interval):
            try:
                with session_scope(engine) as own:
                    own.execute(
                        update(JobBatch)
                        .where(JobBatch.id == batch_id, JobBatch.state == "running")
                        .values(heartbeat_at=utcnow())
                    )
            except Exception:  # noqa: BLE001  a missed beat is retried; the sweep tolerates a few
                log.warning("heartbeat of batch %s failed", batch_id, exc_info=True)

    thread = threading.Thread(target=beat, name=f"heartbeat-{batch_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _give_up(session: Session, batch: JobBatch, error: str) -> Job:
    """Fail a batch that cannot run at all (no grade rows: there may be no grader to file them under)."""
    batch.state, batch.error, batch.errors = "failed", error, len(batch.cells)
    job = session.get_one(Job, batch.job_pk)
    job.message = f"batch {batch.number}: {error}"
    session.commit()
    job = refresh_job(session, job.id)
    session.commit()
    return job


def _claims_exhausted(batch: JobBatch) -> str | None:
    limit = get_settings().job_max_claims
    if batch.attempts <= limit:
        return None
    return f"gave up after {limit} claims: the worker stopped each time (killed, or out of memory?)"


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
    _note_grader(job, grader_pk)
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
        _summarise_errors(session, job)
    return job


def _summarise_errors(session: Session, job: Job) -> None:
    """A finished job with cell errors says how many of which kind; one whose every cell failed is failed."""
    if not job.errors:
        return
    if job.errors >= job.total:
        job.state = "failed"
    if job.message and job.message != UNDELIVERED:  # a batch that gave up already said why
        return
    summary = ErrorSummary()
    for error, count in session.execute(
        select(JobBatch.error, JobBatch.errors).where(JobBatch.job_pk == job.id, JobBatch.errors > 0)
    ):
        parsed = ErrorSummary.parse(error)
        if parsed.total != count and len(parsed.counts) == 1:  # a failed batch's one message, for all its cells
            parsed.counts = {kind: count for kind in parsed.counts}
        summary.merge(parsed)
    job.message = f"{job.errors} of {job.total} cells failed: {summary.render()}"[:2000]


def _halt(session: Session, job: Job, batch: JobBatch | None, reason: str) -> Job:
    """End a job now, failed with ``reason``: its queued batches are cancelled, finished ones stay."""
    if batch is not None and batch.state == "running":
        batch.state, batch.error = "failed", reason
    session.execute(
        update(JobBatch).where(JobBatch.job_pk == job.id, JobBatch.state == "queued").values(state="cancelled")
    )
    session.commit()
    job = refresh_job(session, job.id)
    if job.state in ACTIVE or job.state == "done":
        job.state, job.finished_at = "failed", utcnow()
    job.message = reason[:2000]
    session.commit()
    return job


# (job id, created) → None (passed) or why it failed; per worker process. The creation time tells a
# job from another database's (or a recreated database's) job with the same id.
_preflighted: dict[tuple[int, str], str | None] = {}
_preflight_lock = threading.Lock()


def _preflight_job(job: Job, spec: GraderSpec, method: GradingMethod) -> str | None:
    """Once per job (and worker process), before its first batch: why the server cannot run it, or None."""
    if spec.backend != "openai":
        return None
    key = (job.id, str(job.created_at))
    with _preflight_lock:
        if key not in _preflighted:
            try:
                preflight_method(method)
                _preflighted[key] = None
            except PreflightFailed as error:
                _preflighted[key] = f"preflight failed: {error}"
            except Exception as error:  # noqa: BLE001  shown on the job; the details go to the log
                log.exception("job %s: preflight failed", job.id)
                _preflighted[key] = f"preflight failed: {public_error(spec, error)}"
        return _preflighted[key]


def _consecutive_failure(session: Session, job: Job, batch: JobBatch, limit: int) -> str | None:
    """Fail-fast across batches: the reason to stop when the latest batches' cells all failed alike.

    Counts back from this batch over finished batches whose every cell failed with one kind of
    error (cells never sent aside); ``limit`` such cells in a row stop the job (0: never).
    """
    if limit <= 0:
        return None
    rows = session.execute(
        select(JobBatch.error, JobBatch.errors, JobBatch.cells)
        .where(JobBatch.job_pk == job.id, JobBatch.number <= batch.number, JobBatch.state.in_(("done", "failed")))
        .order_by(JobBatch.number.desc())
    ).all()
    kind: str | None = None
    run, example = 0, ""
    for error, errors, cells in rows:
        parsed = ErrorSummary.parse(error)
        kinds = set(parsed.counts) - {NOT_SENT}
        if kinds & CELL_LOCAL:
            break
        if errors < len(cells) or len(kinds) != 1 or (kind is not None and kinds != {kind}):
            break
        kind = kinds.pop()
        run += parsed.counts[kind] if parsed.total == errors else errors
        example = example or parsed.examples[kind]
    if run >= limit:
        return f"stopped after {run} consecutive {kind} errors: {example}"
    return None


def execute_batch(session: Session, batch_id: int, backoff: float = 1.0) -> Job | None:
    """Grade one batch: claim it, grade with retries and backoff, record. Commits (it is a task).

    A batch claimed too often, or whose grader cannot be built, is failed with the reason shown.
    """
    batch = _claim(session, batch_id)
    session.commit()
    if batch is None:
        return None
    job = session.get_one(Job, batch.job_pk)
    spec = GraderSpec.from_dict(job.params["grader"])
    exhausted = _claims_exhausted(batch)
    if exhausted:
        return _give_up(session, batch, exhausted)
    try:
        validate_spec(spec)  # a clear reason for a spec stored before validation, or edited since
        method = method_for(spec)
    except Exception as error:  # noqa: BLE001  shown on the job; the details go to the log
        log.exception("batch %s: building the grader failed", batch_id)
        return _give_up(session, batch, f"the grader cannot be built: {public_error(spec, error)}")
    refused = _preflight_job(job, spec, method)
    if refused is not None:
        return _halt(session, job, batch, refused)
    for attempt in range(MAX_ATTEMPTS):
        try:
            _grade(session, job, batch, method)
            break
        except Exception as error:  # noqa: BLE001  any failure is retried, then recorded per cell
            log.warning("batch %s, attempt %s failed", batch_id, attempt + 1, exc_info=True)
            session.rollback()
            session.info.pop("grader_pks", None)  # primary keys cached by ensure_grader were rolled back
            batch = session.get_one(JobBatch, batch_id)
            job = session.get_one(Job, batch.job_pk)
            if attempt == MAX_ATTEMPTS - 1:
                _fail(session, job, batch, method, public_error(spec, error))
            else:
                batch.heartbeat_at = utcnow()
                session.commit()
                time.sleep(backoff * 2**attempt)
    session.commit()
    stop = _consecutive_failure(session, job, batch, spec.max_consecutive_errors)
    if stop is not None and job.state in ACTIVE:
        return _halt(session, job, None, stop)
    job = refresh_job(session, batch.job_pk)
    session.commit()
    return job


def _grade(session: Session, job: Job, batch: JobBatch, method: GradingMethod) -> None:
    """Read, commit, call the model under a heartbeat, then write: no transaction spans the model calls."""
    prepared = prepare_batch(session, method, cells_for(session, job, batch.cells))
    progress = in_batch_publisher(job)  # reads the row now: the commit expires it
    session.commit()  # ends the read; writers (cancel, overrides) never wait on the model
    start = time.perf_counter()
    with heartbeat(session, batch.id):
        computed = compute_batch(method, prepared, progress)
    seconds = time.perf_counter() - start
    grader_pk = ensure_method_grader(session, method)
    _note_grader(job, grader_pk)
    report = store_batch(session, grader_pk, prepared, computed)
    _record(batch, report, seconds)
    if report.not_sent:
        report.summary.add(f"{NOT_SENT}: the server kept failing; not sent", report.not_sent)
        batch.errors += report.not_sent
    batch.error = report.summary.render() or None


def _note_grader(job: Job, grader_pk: int) -> None:
    """Record the grader row the job writes into: its regrades find the spec by this id (collection_grader).

    Set by the worker, not at launch: the identity is the one the worker's backend reports.
    """
    if job.params.get("grader_id") != grader_pk:
        job.params = {**job.params, "grader_id": grader_pk}


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
    """A job that drafts items with an LLM into a draft rubric version.

    Its one batch (no cells) carries the claim, the heartbeat and the attempts, so the sweep
    recovers a drafting job whose worker died exactly as it recovers a grading batch.
    """
    validate_generator(spec)
    job = Job(
        collection_id=collection.id,
        kind="generate",
        launched_by=launched_by,
        params={"grader": spec.as_dict(), "kind": kind, "style": style, "query_ids": query_ids},
        total=len(query_ids),
    )
    session.add(job)
    session.flush()
    session.add(JobBatch(job_pk=job.id, number=0, cells=[]))
    session.flush()
    announce_launch(session, job)
    after_commit(session, partial(_start, job.id))
    return job


def execute_generation(session: Session, job_id: int) -> Job:
    """Run a drafting job (commits, as a task does); failures are recorded per query in the message."""
    job = session.get_one(Job, job_id)
    batch_id = session.scalar(select(JobBatch.id).where(JobBatch.job_pk == job_id))
    batch = _claim(session, batch_id) if batch_id is not None else None
    session.commit()
    if batch is None:
        return job
    spec = GraderSpec.from_dict(job.params["grader"])
    exhausted = _claims_exhausted(batch)
    if exhausted:
        return _give_up(session, batch, exhausted)
    try:
        with heartbeat(session, batch.id):
            _preflight_drafter(spec)
            _draft(session, job, spec)
        batch.state = "done" if job.state == "done" else "failed"
    except PreflightFailed as error:  # the server cannot draft: the hint is the message
        session.rollback()
        job, batch = session.get_one(Job, job_id), session.get_one(JobBatch, batch.id)
        job.state, job.message = "failed", f"preflight failed: {error}"
        batch.state, batch.error = "failed", job.message
    except Exception as error:  # noqa: BLE001  the job row says what went wrong
        log.exception("drafting job %s failed", job_id)
        session.rollback()
        job, batch = session.get_one(Job, job_id), session.get_one(JobBatch, batch.id)
        job.state, job.message = "failed", public_error(spec, error)
        batch.state, batch.error = "failed", job.message
    job.finished_at = utcnow()
    session.commit()
    return job


def _preflight_drafter(spec: GraderSpec) -> None:
    """A drafting job on an OpenAI-compatible server checks it first (raises ``PreflightFailed``)."""
    if spec.backend == "openai":
        from app.grading.preflight import preflight_backend
        from app.grading.service import build_backend

        preflight_backend(build_backend(spec), "generate")


def _draft(session: Session, job: Job, spec: GraderSpec) -> None:
    """Draft into a new version; ``draft_bank`` reads, calls the model, then writes, all uncommitted here."""
    from app.grading.service import build_backend
    from app.rubrics.generation import draft_bank

    params = job.params
    report = draft_bank(
        session,
        session.get_one(Collection, job.collection_id),
        build_backend(spec),
        kind=params["kind"],
        style=params["style"],
        query_ids=params["query_ids"],
        created_by=job.launched_by,
    )
    job.done, job.errors = job.total - len(report.failures), len(report.failures)
    job.message = f"draft version {report.version_number}: {report.items} items" if report.version_number else ""
    job.message += "".join(f"; {q}: {why}" for q, why in report.failures.items())
    job.state = "done" if report.version_number else "failed"
