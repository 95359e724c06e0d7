"""In the browser: a running batch's uncommitted cells move the job's row; its commit restores the truth."""

from __future__ import annotations

from app.collections.service import get_collection
from app.events import LOCAL, publish
from app.grading.service import GraderSpec
from app.jobs.events import in_batch_event, job_event
from app.models import Job
from app.models.base import utcnow
from tests.conftest import Database
from tests.jobs.helpers import wait_for
from tests.web.test_browser import SHOTS, Session, browser, server  # noqa: F401


def _running_job(db: Database) -> tuple[int, int]:
    with db.session() as session:
        collection = get_collection(session, "sample")
        job = Job(
            collection_id=collection.id,
            kind="grade",
            launched_by="judge",
            params={"grader": GraderSpec().as_dict()},
            total=72,
            done=16,
            model_calls=16,
            state="running",
            started_at=utcnow(),
        )
        session.add(job)
        session.commit()
        return collection.id, job.id


def test_the_jobs_row_shows_cells_in_the_running_batch(
    server: str,  # noqa: F811
    browser: object,  # noqa: F811
    web_db: Database,
) -> None:
    collection_id, job_id = _running_job(web_db)
    with web_db.session() as session:
        committed = job_event(session.get_one(Job, job_id))
    judge = Session(browser, server, "judge")
    judge.visit("/c/sample/jobs")
    row = judge.page.locator(f"#job-{job_id}")
    assert "22%" in row.inner_text()  # 16 of 72 committed
    wait_for(lambda: LOCAL.subscriber_count(collection_id) == 1, 10, "the page's event stream")
    publish(collection_id, in_batch_event(committed, 8))
    judge.page.wait_for_function(
        "id => document.querySelector('#job-' + id).innerText.includes('not saved yet')", arg=job_id
    )
    text = row.inner_text()
    assert "33%" in text and "8 more graded, not saved yet" in text  # (16 + 8) / 72
    assert row.locator("progress").evaluate("p => p.value") == 24 / 72
    SHOTS.mkdir(parents=True, exist_ok=True)
    judge.page.screenshot(path=str(SHOTS / "jobs-in-batch.png"), full_page=True)
    publish(collection_id, committed)  # the batch's commit: the row is re-fetched with committed counts
    judge.page.wait_for_function(
        "id => !document.querySelector('#job-' + id).innerText.includes('not saved yet')", arg=job_id
    )
    assert "22%" in row.inner_text()
    assert not judge.errors
    judge.close()
