"""Workers publish facts, not computations (issue 11, scope 6), on both databases and both transports.

After each committed batch: one ``job-<id>`` event with the job's counters and at most one
``grades`` event with the collection's revision (always one after the job's last batch); a job
appearing or ending is one ``jobs`` event. Nothing carries a leaderboard: the pages re-fetch.
The embedded worker runs the batches in this process; on Redis the test runs the Celery task
itself, as a worker would, and the events go through a real redis-server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app.collections.service import get_collection
from app.config import get_settings
from app.db import session_scope
from app.jobs import service
from app.models import Job, JobBatch
from tests.conftest import Database, RedisServer
from tests.grading.conftest import import_sample
from tests.jobs.helpers import EventLog, launch, revision, wait_for, wait_job

FACTS = {"job", "job-progress", "jobs", "grades"}  # job-progress: a running batch's uncommitted cells


@pytest.fixture(params=["embedded", "redis"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "redis":
        monkeypatch.setenv("RUBRIC_REDIS_URL", request.getfixturevalue("redis_server").url)
    else:
        monkeypatch.delenv("RUBRIC_REDIS_URL", raising=False)
    get_settings.cache_clear()
    yield request.param
    get_settings.cache_clear()


@contextmanager
def watching(db: Database) -> Iterator[EventLog]:
    """The collection's events, in a thread that has ended (and closed its subscription) on leaving."""
    with db.session() as session:
        log = EventLog(get_collection(session, "sample").id)
    thread = threading.Thread(target=log.run, daemon=True)
    thread.start()
    assert log.ready.wait(10)
    time.sleep(0.3)  # the Redis subscription is live once the first get_message ran
    try:
        yield log
    finally:
        log.stop.set()
        thread.join(10)


def _batches(db: Database, job_id: int) -> list[int]:
    with db.session() as session:
        return list(session.scalars(select(JobBatch.id).where(JobBatch.job_pk == job_id).order_by(JobBatch.number)))


def _run_on_celery_task(batch_ids: list[int]) -> None:
    """What a Celery worker does with each delivered message (none runs here; the broker just holds them)."""
    from worker.tasks import grade_cells

    for batch_id in batch_ids:
        grade_cells(batch_id)


def _per_batch(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The events each batch published: from one job progress event up to the next."""
    groups: list[list[dict[str, Any]]] = []
    for event in events:
        if event["type"] == "job-progress":
            continue  # tested in test_progress_within_batch.py
        if event["type"] == "job":
            groups.append([])
        if groups:
            groups[-1].append(event)
    return groups


def test_each_batch_publishes_its_job_and_the_grades_revision_and_nothing_computed(
    database: Database, transport: str, tmp_path: Path
) -> None:
    import_sample(tmp_path)
    with watching(database) as log:
        job_id = launch(database, batch_cells=32)  # the sample's 72 cells: batches of 32, 32 and 8
        if transport == "redis":
            _run_on_celery_task(_batches(database, job_id))
        assert wait_job(database, job_id).state == "done"
        wait_for(lambda: log.final_grades(job_id) is not None, 30, "the job's final grades event")
    events = log.events

    assert {e["type"] for e in events} <= FACTS
    assert not any("systems" in e or "measure" in e for e in events), "no event carries a leaderboard"
    assert events[0] == {"type": "jobs", "job": job_id, "state": "queued"}  # the new job's row appears
    batches = _per_batch(events)
    done = [group[0]["done"] for group in batches]  # batches run in any order: 32, 32 and 8 cells
    assert len(done) == 3 and done == sorted(done) and done[-1] == 72
    for group in batches:
        progress = group[0]
        assert progress["event"] == f"job-{job_id}" and progress["job"] == job_id and progress["total"] == 72
    for group in batches[:-1]:  # a running job: at most one grades event a second, none for the list
        assert [e["type"] for e in group[1:]] in ([], ["grades"])
    last = batches[-1]
    assert last[0]["state"] == "done"
    assert last[1:] == [
        {"type": "jobs", "job": job_id, "state": "done"},
        {"type": "grades", "revision": revision(database)},  # after the commit: the revision the pages will read
    ]
    revisions = [e["revision"] for e in events if e["type"] == "grades"]
    assert revisions == sorted(set(revisions))


def test_a_cancelled_job_tells_its_row_and_the_list_once_committed(
    database: Database, tmp_path: Path, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Redis with no worker running, the job stays queued until the cancel; a rolled-back cancel says nothing."""
    import_sample(tmp_path)
    monkeypatch.setenv("RUBRIC_REDIS_URL", redis_server.url)
    get_settings.cache_clear()
    with watching(database) as log:
        job_id = launch(database)
        with pytest.raises(RuntimeError), session_scope() as session:
            service.cancel(session, session.get_one(Job, job_id))
            raise RuntimeError("the request failed: its transaction rolls back")
        with session_scope() as session:
            service.cancel(session, session.get_one(Job, job_id))
        wait_for(lambda: len(log.of("jobs", job_id)) == 2, 10, "the cancel")
    get_settings.cache_clear()
    assert [e["state"] for e in log.of("jobs", job_id)] == ["queued", "cancelled"]
    (progress,) = log.of("job", job_id)  # Redis keeps the order: a rolled-back cancel would show first
    assert progress["event"] == f"job-{job_id}" and progress["state"] == "cancelled"
    assert log.of("grades") == []  # no grade changed
