"""Jobs on real Redis and real Celery worker processes: end to end, crash safety, Redis restarts, cancel."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.config import get_settings
from app.db import session_scope
from app.grading.engine import CellScope
from app.jobs import service
from app.jobs.launch import sweep_orphans
from app.models import Grade, Job, JobBatch
from tests.conftest import REPO, Database, RedisServer
from tests.jobs.helpers import (
    SMOLLM2_SCORE,
    cover_board,
    edit_and_regrade,
    grade_count,
    job_row,
    launch,
    revision,
    wait_for,
    wait_job,
    watch,
    weak_bees_cover,
)

STALE_SECONDS = 4


class Worker:
    """A `rubric worker` subprocess (Celery, solo pool) on both queues."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log = env, log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        handle = self.log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "worker", "--queues", "gpu,default", "--concurrency", "1"],
            cwd=REPO,
            env=self.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def celery(
    sample_db: Database, redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Worker]:
    monkeypatch.setenv("RUBRIC_REDIS_URL", redis_server.url)
    monkeypatch.setenv("RUBRIC_JOB_STALE_SECONDS", str(STALE_SECONDS))
    monkeypatch.setenv("RUBRIC_VISIBILITY_TIMEOUT", "30")
    get_settings.cache_clear()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    worker = Worker(env, tmp_path / "worker.log")
    worker.start()
    yield worker
    worker.stop()
    get_settings.cache_clear()


def _sweep() -> list[int]:
    return sweep_orphans(STALE_SECONDS)


def _assert_every_cell_graded_once(db: Database, job_id: int) -> None:
    job = job_row(db, job_id)
    with db.session() as session:
        rows = session.scalar(select(func.count()).select_from(Grade))
        distinct = session.scalar(
            select(func.count()).select_from(select(Grade.pool_entry_pk, Grade.item_id).distinct().subquery())
        )
    assert job.state == "done" and job.done == job.total and job.errors == 0
    assert rows == distinct == job.total  # one row per cell: nothing lost, nothing duplicated


def test_grading_job_end_to_end_on_celery(celery: Worker, sample_db: Database) -> None:
    log = watch(sample_db)
    job_id = launch(sample_db, batch_cells=16)
    job = wait_job(sample_db, job_id)
    assert (job.state, job.total, job.done, job.model_calls, job.errors) == ("done", 72, 72, 72, 0)
    assert grade_count(sample_db) == 72
    wait_for(lambda: log.final_grades(job_id) is not None, 30, "the job's final grades event")
    assert log.of("job", job_id)[-1]["done"] == 72
    assert log.final_grades(job_id) == {"type": "grades", "revision": revision(sample_db)}
    log.stop.set()


def test_edit_regrades_exactly_the_affected_cells_on_celery(celery: Worker, sample_db: Database) -> None:
    wait_job(sample_db, launch(sample_db))
    log = watch(sample_db)
    job_id, _ = edit_and_regrade(
        sample_db, "What is the waggle dance?", "Which stock market index closed higher on Friday?"
    )
    job = wait_job(sample_db, job_id)
    assert (job.total, job.model_calls) == (8, 8)
    wait_for(lambda: log.final_grades(job_id) is not None, 30, "the job's final grades event")
    assert weak_bees_cover(cover_board(sample_db)) > 0
    log.stop.set()


def test_sigkilled_worker_loses_no_cell_and_duplicates_none(celery: Worker, sample_db: Database) -> None:
    scope = CellScope(query_ids=frozenset({"bees"}))
    job_id = launch(sample_db, SMOLLM2_SCORE, batch_cells=3, scope=scope)  # 24 cells, 8 batches
    wait_for(lambda: job_row(sample_db, job_id).done >= 3, 180, "the first batch")
    celery.kill()
    assert job_row(sample_db, job_id).state == "running"
    celery.start()
    wait_for(lambda: bool(_sweep()) or job_row(sample_db, job_id).state == "done", 60, "orphans requeued")
    job = wait_job(sample_db, job_id, 300)
    _assert_every_cell_graded_once(sample_db, job_id)
    assert job.total == 24


def test_job_survives_a_redis_restart(celery: Worker, redis_server: RedisServer, sample_db: Database) -> None:
    scope = CellScope(query_ids=frozenset({"bread"}))
    job_id = launch(sample_db, SMOLLM2_SCORE, batch_cells=3, scope=scope)
    wait_for(lambda: job_row(sample_db, job_id).done >= 3, 180, "the first batch")
    redis_server.stop()
    redis_server.start()
    wait_for(lambda: (_sweep(), job_row(sample_db, job_id).state == "done")[1], 300, "job done after the restart")
    _assert_every_cell_graded_once(sample_db, job_id)


def test_cancel_stops_within_one_batch_on_celery(celery: Worker, sample_db: Database) -> None:
    job_id = launch(sample_db, SMOLLM2_SCORE, batch_cells=2, scope=CellScope(query_ids=frozenset({"aurora"})))
    wait_for(lambda: job_row(sample_db, job_id).done >= 2, 180, "the first batch")
    with session_scope() as session:
        service.cancel(session, session.get_one(Job, job_id))
    with sample_db.session() as session:
        done_at_cancel = session.scalar(select(func.count()).where(JobBatch.job_pk == job_id, JobBatch.state == "done"))
    wait_for(lambda: "running" not in set(_batch_states(sample_db, job_id)), 60, "the running batch to finish")
    states = _batch_states(sample_db, job_id)
    assert job_row(sample_db, job_id).state == "cancelled"
    assert states.count("done") <= (done_at_cancel or 0) + 1 and "queued" not in states


def _batch_states(db: Database, job_id: int) -> list[str]:
    with db.session() as session:
        return list(session.scalars(select(JobBatch.state).where(JobBatch.job_pk == job_id)))
