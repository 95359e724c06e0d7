"""Jobs in embedded mode (no Redis): the same job rows and code path as the Celery workers."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from app.collections.service import get_collection
from app.config import get_settings
from app.db import session_scope
from app.grading.service import GraderSpec
from app.jobs import service
from app.jobs.embedded import embedded_worker
from app.models import Grade, Job, JobBatch
from tests.conftest import Database
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


@pytest.fixture(autouse=True)
def _embedded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUBRIC_REDIS_URL", raising=False)
    get_settings.cache_clear()
    assert get_settings().redis_url is None


def test_grading_job_end_to_end(sample_db: Database) -> None:
    log = watch(sample_db)
    job_id = launch(sample_db, batch_cells=16)
    job = wait_job(sample_db, job_id)
    assert (job.state, job.total, job.done, job.errors, job.model_calls) == ("done", 72, 72, 0, 72)
    assert grade_count(sample_db) == 72
    wait_for(lambda: log.final_grades(job_id) is not None, 30, "the job's final grades event")
    progress = log.of("job", job_id)
    assert progress[-1]["done"] == 72 and len(progress) == 5  # one event per batch (16+16+16+16+8)
    assert {e["event"] for e in progress} == {f"job-{job_id}"}  # named for the job: only its row listens
    assert log.final_grades(job_id) == {"type": "grades", "revision": revision(sample_db)}
    assert not log.of("leaderboard")  # workers compute nothing for the pages
    assert {s["system"] for s in cover_board(sample_db)["systems"]} >= {"strong-ranker", "weak-ranker"}
    log.stop.set()


def test_editing_one_question_regrades_exactly_its_cells(sample_db: Database) -> None:
    wait_job(sample_db, launch(sample_db))
    log = watch(sample_db)
    before = grade_count(sample_db)
    job_id, added = edit_and_regrade(
        sample_db, "What is the waggle dance?", "Which stock market index closed higher on Friday?"
    )
    job = wait_job(sample_db, job_id)
    assert len(added) == 1 and job.kind == "regrade"
    assert (job.total, job.model_calls, job.cached) == (8, 8, 0)  # that question × the 8 bees passages
    assert grade_count(sample_db) == before + 8
    wait_for(lambda: log.final_grades(job_id) is not None, 30, "the job's final grades event")
    board = cover_board(sample_db)
    assert board["settings"]["rubric_version"] == 2
    # only the weak ranker retrieved the stock-market passage that the new question matches
    assert weak_bees_cover(board) > 0
    log.stop.set()


def test_deleting_a_question_needs_no_grading_but_updates_the_leaderboard(sample_db: Database) -> None:
    from app.jobs.launch import launch_after_edit
    from app.models import BankItem
    from app.rubrics.editing import ItemChange, apply_edit

    wait_job(sample_db, launch(sample_db))
    log = watch(sample_db)
    with sample_db.session() as session:
        collection = get_collection(session, "sample")
        item = session.scalars(select(BankItem).where(BankItem.text == "What is the waggle dance?")).one()
        result = apply_edit(
            session, collection, [ItemChange("delete", "bees", item.item_id, expected_text=item.text)], user="j"
        )
        job = launch_after_edit(session, collection, result, GraderSpec(), "j")
        session.commit()  # the after-commit hook announces the empty job
        job_id = job.id
    assert job_row(sample_db, job_id).state == "done" and job_row(sample_db, job_id).total == 0
    wait_for(lambda: log.final_grades(job_id) is not None, 30, "grades event")
    log.stop.set()


def test_cancel_stops_within_one_batch(sample_db: Database) -> None:
    job_id = launch(sample_db, SMOLLM2_SCORE, batch_cells=2)
    wait_for(lambda: job_row(sample_db, job_id).done >= 2, 120, "first batch")
    with session_scope() as session:
        service.cancel(session, session.get_one(Job, job_id))
    wait_for(embedded_worker().idle, 60, "embedded worker idle")
    job = job_row(sample_db, job_id)
    assert job.state == "cancelled"
    with sample_db.session() as session:
        states = session.scalars(select(JobBatch.state).where(JobBatch.job_pk == job_id)).all()
    assert states.count("done") <= 3  # the one running when cancelled may finish
    assert states.count("cancelled") >= len(states) - 3


def test_a_failing_batch_is_retried_then_recorded_per_cell(sample_db: Database) -> None:
    broken = GraderSpec(backend="hf", model="/nonexistent/model-directory", mode="score")
    with sample_db.session() as session:
        from app.jobs.launch import launch_grading

        job = launch_grading(session, get_collection(session, "sample"), broken, batch_cells=100)
        session.commit()  # the after-commit hook hands the batch to the embedded worker
        job_id = job.id
    assert wait_job(sample_db, job_id, 120).state == "failed"
    with sample_db.session() as session:
        batch = session.scalars(select(JobBatch).where(JobBatch.job_pk == job_id)).one()
        assert batch.attempts == 1 and batch.state == "failed" and batch.errors == 72
        assert "OSError" in (batch.error or "") and "details in the worker log" in (batch.error or "")
        errors = session.scalars(select(Grade.error)).all()
    assert len(errors) == 72 and all(e for e in errors)


def test_estimate_splits_cached_and_new(sample_db: Database) -> None:
    from app.grading.service import plan_for

    wait_job(sample_db, launch(sample_db))
    with sample_db.session() as session:
        collection = get_collection(session, "sample")
        spec = GraderSpec()
        cells = plan_for(session, collection, spec, None, service_scope())
        cached = service.estimate(session, spec, cells, {})
        assert (cached.prompts, cached.cached, cached.new) == (72, 72, 0)
        assert cached.seconds == 0.0  # throughput is known after the first job
        api = GraderSpec(backend="openai", model="gpt-x")
        priced = service.estimate(session, api, cells, {"gpt-x": {"input_per_1k": 0.5}})
        assert priced.new == 72 and priced.tokens > 0 and priced.cost == pytest.approx(priced.tokens / 1000 * 0.5)


def service_scope():  # noqa: ANN201
    from app.grading.engine import CellScope

    return CellScope()
