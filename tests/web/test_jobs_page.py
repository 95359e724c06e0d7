"""The jobs page: estimates from measured speed, no launch when all is cached, final states, drafting jobs."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.accounts.service import create_user
from app.collections.service import get_collection
from app.db import session_scope
from app.models import Job
from app.web.main import create_app
from app.web.routes.jobs import about_left
from tests.conftest import Database
from tests.jobs.helpers import wait_job, watch
from tests.web.conftest import login

# The seed grades with the default grader; DirectSimilarity is the same similarity model on new cells.
CACHED = {"backend": "similarity", "prompt_class": "Similarity", "mode": "score", "query_id": "bees"}
NEW = {**CACHED, "prompt_class": "DirectSimilarity"}


@pytest.fixture
def web(web_db_any: Database) -> Iterator[TestClient]:
    with TestClient(create_app()) as test_client:
        yield test_client


def _jobs(db: Database) -> int:
    with db.session() as session:
        return int(session.scalar(select(func.count()).select_from(Job)) or 0)


def _seed_grader_backend(db: Database) -> str:
    with db.session() as session:
        return str(session.scalars(select(Job.params)).first()["grader"]["backend"])  # type: ignore[index]


def test_the_estimate_uses_the_measured_speed_and_counts_no_tokens_without_a_prompt(
    web: TestClient, web_db_any: Database
) -> None:
    token = login(web, "organizer")
    if _seed_grader_backend(web_db_any) != "similarity":
        pytest.skip("the seed grader is not the similarity grader")
    page = web.post("/c/sample/jobs/estimate", data={**NEW, "csrf_token": token})
    assert page.status_code == 200, page.text[:300]
    text = re.sub(r"\s+", " ", page.text)
    assert "No speed measured" not in text
    assert re.search(r"About \d+ (s|min|h)[^.]* at this grader's measured speed \([\d.,]+ (cells/s|s per cell)\)", text)
    assert "prompt tokens" not in text  # a similarity grader sends no prompt
    assert "<button>Launch</button>" in page.text


def test_nothing_is_launched_when_every_cell_is_cached(web: TestClient, web_db_any: Database) -> None:
    token = login(web, "organizer")
    page = web.post("/c/sample/jobs/estimate", data={**CACHED, "csrf_token": token})
    assert 'data-testid="nothing-to-grade"' in page.text and "every cell is cached" in page.text
    assert re.search(r"<button disabled[^>]*>Launch</button>", page.text)
    before = _jobs(web_db_any)
    refused = web.post("/c/sample/jobs", data={**CACHED, "csrf_token": token}, follow_redirects=False)
    assert refused.status_code == 409 and "nothing to grade: every cell is cached" in refused.text
    assert _jobs(web_db_any) == before


def test_a_finished_job_shows_its_final_state_on_the_row_the_page_and_its_event(
    web: TestClient, web_db_any: Database
) -> None:
    token = login(web, "organizer")
    events = watch(web_db_any)
    launched = web.post("/c/sample/jobs", data={**NEW, "csrf_token": token}, follow_redirects=False)
    assert launched.status_code == 303, launched.text[:300]
    job_id = int(launched.headers["location"].rsplit("#job-", 1)[1])
    job = wait_job(web_db_any, job_id)
    assert job.state == "done"
    final = [e for e in events.of("job", job_id) if e["state"] == "done"]
    assert final, "the job's last event carries its final state"
    assert any(e["state"] == "done" for e in events.of("jobs", job_id))
    events.stop.set()
    row = web.get(f"/jobs/{job_id}/row").text  # what the row swaps in on that event
    assert row.lstrip().startswith(f'<tr id="job-{job_id}" data-state="done">'), row[:200]
    assert "✓ done" in row and "100%" in row and "cancel" not in row and "hx-trigger" not in row
    fragment = web.get(f"/jobs/{job_id}", headers={"HX-Request": "true"}).text
    assert 'data-state="done"' in fragment and "cancel" not in fragment
    listing = web.get("/c/sample/jobs").text  # a reload
    assert f'hx-trigger="sse:job-{job_id}"' not in listing
    assert f'<tr id="job-{job_id}" data-state="done">' in listing


def _queued_job(db: Database, kind: str, launched_by: str) -> int:
    """A live job row with no batches: no worker picks it up, so it stays live while the test cancels it."""
    with db.session() as session:
        collection = get_collection(session, "sample")
        params = {"grader": {"backend": "hf", "model_label": "smollm2"}, "kind": "questions", "query_ids": ["bees"]}
        job = Job(collection_id=collection.id, kind=kind, launched_by=launched_by, params=params, total=1)
        session.add(job)
        session.commit()
        return job.id


def test_the_judge_who_launched_a_drafting_job_cancels_it_others_cannot(web: TestClient, web_db_any: Database) -> None:
    with session_scope() as session:
        create_user(session, "judge2", "judge", "another-judge-4")
    own, other = _queued_job(web_db_any, "generate", "judge"), _queued_job(web_db_any, "generate", "judge2")
    token = login(web, "judge")
    listing = web.get("/c/sample/jobs").text
    assert "draft questions for bees with smollm2" in listing
    assert f'aria-label="cancel job {own}"' in listing and f'aria-label="cancel job {other}"' not in listing
    refused = web.post(f"/jobs/{other}/cancel", data={"csrf_token": token}, follow_redirects=False)
    assert refused.status_code == 403
    done = web.post(f"/jobs/{own}/cancel", data={"csrf_token": token, "back": "job"}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"].endswith(f"/jobs/{own}")
    page = web.get(f"/jobs/{own}").text
    assert f"Job #{own}: draft questions for bees with smollm2" in page
    assert 'data-state="cancelled"' in page and "why:</b> cancelled by judge" in page
    web.post("/logout", headers={"X-CSRF-Token": token})
    token = login(web, "organizer")
    assert web.post(f"/jobs/{other}/cancel", data={"csrf_token": token}, follow_redirects=False).status_code == 303
    assert wait_job(web_db_any, other).message == "cancelled by organizer"


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"model": ""}, "model: choose the model"),
        ({"model": "   "}, "model: choose the model"),
        ({"model": "smollm2", "backend": "openai", "base_url": "ftp://example.org/v1"}, "base URL: give an http"),
        ({"model": "smollm2", "backend": "openai", "base_url": "javascript:alert(1)"}, "base URL: give an http"),
        ({"model": "smollm2", "backend": "openai", "base_url": "http://[::1"}, "base URL: not a URL"),
        ({"model": "smollm2", "backend": "openai", "base_url": "http://u:p@example.org"}, "no user name or password"),
        ({"model": "smollm2", "backend": "openai", "base_url": "http://x/" + "a" * 2000}, "base_url"),
    ],
)
def test_the_drafting_form_refuses_bad_values(
    client: TestClient, web_db: Database, form: dict[str, str], message: str
) -> None:
    token = login(client, "judge")
    before = _jobs(web_db)
    response = client.post(
        "/c/sample/generate", data={"query_id": "bees", **form, "csrf_token": token}, follow_redirects=False
    )
    assert response.status_code in (400, 422) and message in response.text, response.text[:500]
    assert _jobs(web_db) == before


def test_a_drafting_job_for_an_unreachable_server_fails_fast_with_the_reason(
    web: TestClient, web_db_any: Database
) -> None:
    token = login(web, "judge")
    form = {"query_id": "bees", "model": "smollm2", "backend": "openai", "base_url": "http://127.0.0.1:9/v1"}
    launched = web.post("/c/sample/generate", data={**form, "csrf_token": token}, follow_redirects=False)
    assert launched.status_code == 303, launched.text[:300]
    job_id = int(launched.headers["location"].rsplit("#job-", 1)[1])
    job = wait_job(web_db_any, job_id, timeout=60)
    assert job.state == "failed" and job.message.startswith("preflight failed"), job.message
    assert job.params["grader"]["base_url"] == "http://127.0.0.1:9/v1"
    row = web.get(f"/jobs/{job_id}/row").text
    assert "✕ failed" in row and "why:</b> preflight failed" in row and "cancel" not in row


def test_time_left_reads_like_a_clock() -> None:
    assert about_left(3) == "about 5 s left"
    assert about_left(42) == "about 40 s left"
    assert about_left(119) == "about 2 min left"
    assert about_left(3600 * 2 + 60 * 5) == "about 2 h 5 min left"


def test_a_running_job_shows_its_percentage_and_time_left_at_its_own_pace() -> None:
    from datetime import UTC, datetime, timedelta

    from app.web.deps import CurrentUser
    from app.web.routes.jobs import job_row

    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    job = Job(id=7, kind="grade", state="running", launched_by="ann", params={}, total=40, done=10, errors=0)
    job.created_at, job.started_at, job.message = now, now - timedelta(seconds=40), ""
    row = job_row(job, CurrentUser("ann", "judge"), now=now)
    assert (row["percent"], row["eta"], row["can_cancel"]) == (25, "about 2 min left", True)  # 30 cells × 4 s
    assert job_row(job, CurrentUser("bob", "judge"), now=now)["can_cancel"] is False
