"""Launching grading work: full grades, one query, a new run, or exactly the cells a rubric edit affects."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.collections.graders import primary_grader
from app.collections.queries import GraderRef
from app.config import get_settings
from app.db import session_scope
from app.grading.engine import CellScope
from app.grading.service import GraderSpec, plan_for, validate_spec
from app.jobs import service
from app.jobs.dispatch import dispatch, dispatch_generation
from app.jobs.events import after_batch
from app.models import Collection, Grader, Job, RankingEntry, System
from app.rubrics.editing import EditResult


def collection_grader(session: Session, collection: Collection) -> GraderSpec:
    """The spec the collection's rubric edits regrade with (see ``regrade_spec``)."""
    return regrade_spec(session, collection)[0]


def regrade_spec(session: Session, collection: Collection) -> tuple[GraderSpec, bool]:
    """(spec, whether it writes the primary grader): the primary grader's spec, for the regrades.

    The primary grader is app/collections/graders.py's.

    A grader row does not keep everything a spec holds (device, batch size, timeouts), so the spec
    is that of the newest grade/regrade job that wrote into this grader row: each job records the
    row's id (``grader_id``, set by its worker). Jobs from before that record are matched by what
    the row stored (backend, model, mode, prompt class); no grading method is built. A grader
    that no job here wrote (imported grades), or no grader at all: the default spec, which the
    pages name when they regrade.
    """
    primary = primary_grader(session, collection)
    if primary is None:
        return GraderSpec(), False
    jobs = session.scalars(
        select(Job.params)
        .where(Job.collection_id == collection.id, Job.kind.in_(("grade", "regrade")))
        .order_by(Job.id.desc())
        .limit(200)
    ).all()
    for params in jobs:
        if params.get("grader_id") == primary.id:
            return GraderSpec.from_dict(params["grader"]), True
    options = session.get_one(Grader, primary.id).options
    for params in jobs:
        if "grader_id" not in params and _stored_as(GraderSpec.from_dict(params["grader"]), primary, options):
            return GraderSpec.from_dict(params["grader"]), True
    return GraderSpec(), False


def _stored_as(spec: GraderSpec, grader: GraderRef, options: dict[str, Any]) -> bool:
    """Whether a job from before jobs recorded their grader ran as this grader row, by what the row stored."""
    mode = "similarity" if spec.backend == "similarity" else spec.mode
    return (
        options.get("source") == "rubric grade"
        and options.get("backend") == spec.backend
        and options.get("mode") == mode
        and spec.model_ref in (options.get("model"), options.get("label"), grader.model.removesuffix(":score"))
        and (spec.backend == "similarity" or spec.prompt_class == grader.prompt_class)
    )


def system_scope(session: Session, collection: Collection, system_names: Iterable[str]) -> CellScope:
    """The pool entries that some systems retrieved: a new run's cells."""
    entries = session.scalars(
        select(RankingEntry.pool_entry_pk)
        .join(System, System.id == RankingEntry.system_pk)
        .where(System.collection_id == collection.id, System.name.in_(list(system_names)))
    )
    return CellScope(pool_entry_pks=frozenset(entries))


def launch_grading(
    session: Session,
    collection: Collection,
    spec: GraderSpec,
    *,
    scope: CellScope = CellScope(),
    rubric_version: int | None = None,
    launched_by: str = "cli",
    kind: str = "grade",
    batch_cells: int = service.BATCH_CELLS,
) -> Job:
    validate_spec(spec)  # before planning: the plan reads the spec's prompt class
    cells = plan_for(session, collection, spec, rubric_version, scope)
    return service.launch(
        session,
        collection,
        spec,
        cells,
        kind=kind,
        launched_by=launched_by,
        rubric_version=rubric_version,
        batch_cells=batch_cells,
    )


def launch_after_edit(
    session: Session, collection: Collection, result: EditResult, spec: GraderSpec, launched_by: str
) -> Job:
    """Regrade exactly the new or edited items' cells (a deletion needs no grading, only a new leaderboard)."""
    scope = CellScope(item_ids=frozenset(result.added_item_ids))
    if not result.added_item_ids:
        return service.launch(
            session, collection, spec, [], kind="regrade", launched_by=launched_by, rubric_version=result.version.number
        )
    return launch_grading(
        session,
        collection,
        spec,
        scope=scope,
        rubric_version=result.version.number,
        launched_by=launched_by,
        kind="regrade",
    )


def start(job_id: int) -> None:
    """Hand the job's queued batches to the workers (or announce an empty job).

    Runs as the after-commit hook that ``service.launch`` registers, so a worker never looks for a
    batch that is not committed yet. A broker that refuses is recorded on the job, never raised:
    the launch is committed, and the sweep delivers it later.
    """
    with session_scope() as session:
        batch_ids = service.queued_batches(session, job_id)
        job = session.get_one(Job, job_id)
        if not batch_ids and job.kind != "generate":
            after_batch(session, job)
    deliver(batch_ids)


def deliver(batch_ids: Sequence[int]) -> bool:
    """Send batches to the workers; on failure mark their jobs undelivered (the sweep retries them)."""
    if not batch_ids:
        return True
    with session_scope() as session:
        delivery = service.delivery_for(session, batch_ids)
    try:
        dispatch(delivery.grading)
        for job_id in delivery.drafting_jobs:
            dispatch_generation(job_id)
    except Exception:  # noqa: BLE001  any broker failure; the job row says so and the sweep retries
        log.warning("no worker reachable for jobs %s; the sweep retries", delivery.job_ids, exc_info=True)
        with session_scope() as session:
            service.mark_delivery(session, delivery.job_ids, delivered=False)
        return False
    with session_scope() as session:
        service.mark_delivery(session, delivery.job_ids, delivered=True)
    return True


__all__ = ["collection_grader", "deliver", "launch_after_edit", "launch_grading", "start", "system_scope"]
log = logging.getLogger(__name__)


def wait_until_finished(job_id: int, poll: float = 0.1) -> str:
    """Block until the job leaves queued/running (for the CLI, the demo and benchmarks); its final state."""
    while True:
        with session_scope() as session:
            state = session.get_one(Job, job_id).state
        if state not in service.ACTIVE:
            return state
        time.sleep(poll)


def sweep_orphans(stale_after: float | None = None) -> list[int]:
    """Requeue the batches of live jobs whose worker vanished, and retry deliveries a broker refused.

    In embedded mode the worker's queue lives in this process, so queued batches it does not
    hold (a restarted web process) are handed to it too. Returns the batches (re)delivered.
    """
    stale = get_settings().job_stale_seconds if stale_after is None else stale_after
    with session_scope() as session:
        requeued = service.orphaned_batches(session, stale)
        embedded = get_settings().redis_url is None
        waiting = service.queued_of_live_jobs(session, only_undelivered=not embedded)
        if embedded:
            waiting = _not_held_by_embedded_worker(service.delivery_for(session, waiting))
    batches = list(dict.fromkeys([*requeued, *waiting]))
    deliver(batches)
    return batches


def _not_held_by_embedded_worker(delivery: service.Delivery) -> list[int]:
    from app.jobs.embedded import embedded_worker

    worker, url = embedded_worker(), get_settings().database_url
    lost = [b for b in delivery.grading if not worker.holds(url, "batch", b)]
    return lost + [b for b, job_id in delivery.drafting.items() if not worker.holds(url, "job", job_id)]
