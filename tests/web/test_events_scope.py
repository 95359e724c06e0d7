"""Pages listen to the events they show, and nothing more (issue 11, scope 6).

A job's row re-fetches on its own ``job-<id>`` event only, and a finished job's row not at all;
the jobs list re-fetches once on ``jobs``; the leaderboard re-fetches on ``grades``. The stream
names a job's event after the job. Checked on the rendered HTML, parsed, on both databases.
"""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.collections.service import get_collection
from app.db import session_scope
from app.events import LOCAL, _frame
from app.grading.service import GraderSpec
from app.jobs.events import grades_event, job_event
from app.models import Job
from app.web.main import create_app
from tests.conftest import Database
from tests.jobs.helpers import launch, wait_for
from tests.web.conftest import login
from tests.web.test_browser import CHROMIUM, SHOTS, browser, server  # noqa: F401  the live server and browser
from tests.web.test_browser import Session as BrowserSession


class Triggers(HTMLParser):
    """Each element's SSE triggers, with the id of the job row (``<tr id="job-N">``) it sits in."""

    def __init__(self) -> None:
        super().__init__()
        self.row: str | None = None
        self.found: list[tuple[str | None, str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "tr":
            self.row = attributes.get("id")
        for trigger in (attributes.get("hx-trigger") or "").split(","):
            if trigger.strip().startswith("sse:"):
                self.found.append((self.row, trigger.strip(), attributes))


def _triggers(html: str) -> list[tuple[str | None, str, dict[str, str | None]]]:
    parser = Triggers()
    parser.feed(html)
    return parser.found


def _jobs(state: str, count: int) -> list[int]:
    with session_scope() as session:
        collection = get_collection(session, "sample")
        jobs = [
            Job(
                collection_id=collection.id,
                kind="grade",
                launched_by="organizer",
                params={"grader": GraderSpec().as_dict()},
                total=10,
                done=3,
                state=state,
            )
            for _ in range(count)
        ]
        session.add_all(jobs)
        session.flush()
        return [job.id for job in jobs]


def test_each_job_row_listens_to_its_own_job_only_and_finished_rows_not_at_all(web_db_any: Database) -> None:
    running = _jobs("running", 2)
    with session_scope() as session:
        finished = list(session.scalars(select(Job.id).where(Job.state == "done")))
    assert finished, "the seeded grading job"
    with TestClient(create_app()) as client:
        login(client, "viewer")
        page = client.get("/c/sample/jobs")
        assert page.status_code == 200
        found = _triggers(page.text)
        rows = {(row, trigger) for row, trigger, _ in found if row}
        assert rows == {(f"job-{n}", f"sse:job-{n}") for n in running}
        lists = [attributes for row, trigger, attributes in found if trigger == "sse:jobs"]
        assert len(lists) == 1 and lists[0]["hx-select"] == "[data-testid=jobs]"
        assert {trigger for _, trigger, _ in found} == {"sse:jobs", *(f"sse:job-{n}" for n in running)}

        live = _triggers(client.get(f"/jobs/{running[0]}").text)
        assert [trigger for _, trigger, _ in live] == [f"sse:job-{running[0]}"]
        assert _triggers(client.get(f"/jobs/{finished[0]}").text) == []

        board = _triggers(client.get("/c/sample/leaderboard").text)
        assert [trigger for _, trigger, _ in board] == ["sse:grades"]


def test_the_stream_names_a_job_event_after_its_job() -> None:
    job = Job(id=17, collection_id=1, kind="grade", state="running", total=10, done=3, cached=0, errors=0)
    job.model_calls = 3
    assert _frame(job_event(job)).startswith("event: job-17\ndata: {")
    assert _frame(grades_event(42)) == 'event: grades\ndata: {"type": "grades", "revision": 42}\n\n'


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium package is not installed")
def test_an_open_jobs_page_follows_a_new_job_to_its_end_then_stops_listening(
    server: str,  # noqa: F811  the fixtures of test_browser.py
    browser: object,  # noqa: F811
    web_db: Database,
) -> None:
    organizer = BrowserSession(browser, server, "organizer")
    organizer.visit("/c/sample/jobs")
    with session_scope() as session:
        collection_id = get_collection(session, "sample").id
    wait_for(lambda: LOCAL.subscriber_count(collection_id) == 1, 10, "the page's event stream")
    job_id = launch(web_db, batch_cells=32)  # the embedded worker runs it: batches of 32, 32 and 8 cells
    organizer.page.wait_for_function(  # the row is added, then refreshed at the end, by `jobs` events
        "id => document.querySelector(`tr#job-${id}`)?.dataset.state === 'done'", arg=job_id, timeout=60_000
    )
    row = organizer.page.locator(f"tr#job-{job_id}")
    assert "72/72" in row.inner_text()
    assert row.locator("[hx-trigger]").count() == 0  # a finished row listens no more
    SHOTS.mkdir(parents=True, exist_ok=True)
    organizer.page.screenshot(path=str(SHOTS / "jobs-live.png"), full_page=True)
    assert organizer.errors == []
    organizer.close()
