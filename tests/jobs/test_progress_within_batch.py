"""Progress finer than a batch: a running batch tells its job's row how many cells it has computed.

Backends report their own units of work (app/grading/progress.py; here the encoder's batches of
texts, made small); the engine turns them into cells, and the worker publishes ``job-progress``
events carrying ``in_batch``, cells computed but not committed.
Committed counters stay the truth: the final job and its grades are what they were without it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.collections.service import get_collection
from app.grading import similarity
from app.grading.engine import compute_batch, plan_cells, prepare_batch
from app.grading.service import GraderSpec, build_method
from app.rubrics.service import latest_version
from tests.conftest import Database
from tests.grading.conftest import import_sample
from tests.jobs.helpers import grade_count, launch, wait_for, wait_job
from tests.jobs.test_events_scope import transport, watching  # noqa: F401  (fixture)


def test_a_running_batch_reports_its_computed_cells_before_it_commits(
    database: Database,
    transport: str,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(similarity, "ENCODE_BATCH", 4)  # several encoder calls per 16-cell batch
    import_sample(tmp_path)
    with watching(database) as log:
        job_id = launch(database, batch_cells=16)  # the sample's 72 cells: 16+16+16+16+8
        if transport == "redis":
            from tests.jobs.test_events_scope import _batches, _run_on_celery_task

            _run_on_celery_task(_batches(database, job_id))
        job = wait_job(database, job_id)
        wait_for(lambda: log.final_grades(job_id) is not None, 30, "the job's final grades event")
    mine = [e for e in log.events if e.get("job") == job_id and e["type"] in ("job", "job-progress")]
    hints = [n for n, e in enumerate(mine) if e["type"] == "job-progress"]
    assert hints, f"no batch announced its computed cells: {mine}"
    for n in hints:  # batches run in any order, one at a time in this test
        hint = mine[n]
        before = [e["done"] for e in mine[:n] if e["type"] == "job"]
        after = next(e for e in mine[n:] if e["type"] == "job")  # the commit of the batch it speaks for
        assert hint["event"] == f"job-{job_id}"  # the job's own row hears it
        assert hint["done"] == (before[-1] if before else 0) and 0 < hint["in_batch"] < 16
        assert after["done"] >= hint["done"] + hint["in_batch"]
    assert all(e["state"] == "running" and e["total"] == 72 for e in mine if e["type"] == "job-progress")
    committed = [e for e in mine if e["type"] == "job"]
    assert len(committed) == 5 and committed[-1]["done"] == 72  # one per batch, as without in-batch progress
    assert (job.state, job.total, job.done, job.errors, job.model_calls) == ("done", 72, 72, 0, 72)
    assert grade_count(database) == 72


def test_the_engine_computes_the_same_outcomes_with_and_without_a_progress_callback(
    database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(similarity, "ENCODE_BATCH", 4)
    import_sample(tmp_path)
    with database.session() as session:
        collection = get_collection(session, "sample")
        cells = plan_cells(session, collection, "question", latest_version(session, collection))[:20]
        without = build_method(GraderSpec())
        plain = compute_batch(without, prepare_batch(session, without, cells))
        with_progress, heard = build_method(GraderSpec()), []
        reported = compute_batch(with_progress, prepare_batch(session, with_progress, cells), heard.append)
    assert len(plain) == 20 and reported == plain  # the backend batches alike: the very same outcomes
    texts = with_progress.calls  # texts encoded, 4 per encoder call
    expected = [20 * done // texts for done in range(4, texts, 4)]  # cells, after each call but the last
    assert heard == expected and heard and all(0 < n < 20 for n in heard)
