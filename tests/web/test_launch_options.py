"""The launch form's run options (seed, max new tokens, timeout, max retries): bounded, carried to the job."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.models import Job
from tests.conftest import Database
from tests.web.conftest import login

# DirectSimilarity: cells the seed did not grade, so the launch has something to do (all cached: 409).
FORM = {"backend": "similarity", "prompt_class": "DirectSimilarity", "mode": "score", "query_id": "bees"}


def test_the_form_offers_the_run_options_with_their_bounds(client: TestClient) -> None:
    login(client, "organizer")
    page = client.get("/c/sample/jobs").text
    for name in ("seed", "max_new_tokens", "timeout", "max_retries"):
        assert re.search(rf'<input type="number" name="{name}" min="[\d.]+" max="\d+', page), name


def test_the_estimate_carries_the_options_to_the_launch(client: TestClient, web_db: Database) -> None:
    token = login(client, "organizer")
    options = {"seed": "7", "max_new_tokens": "16", "timeout": "30", "max_retries": "2"}
    estimate = client.post("/c/sample/jobs/estimate", data={**FORM, **options, "csrf_token": token})
    assert estimate.status_code == 200, estimate.text[:300]
    hidden = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', estimate.text))
    assert {k: hidden[k] for k in options} == {**options, "timeout": "30.0"}
    launched = client.post("/c/sample/jobs", data={**hidden, "csrf_token": token}, follow_redirects=False)
    assert launched.status_code == 303, launched.text[:300]
    with web_db.session() as session:
        job = session.scalars(select(Job).order_by(Job.id.desc())).first()
        assert job is not None
        grader = job.params["grader"]
    assert (grader["seed"], grader["max_new_tokens"], grader["timeout"], grader["max_retries"]) == (7, 16, 30.0, 2)


def test_empty_options_are_the_defaults(client: TestClient) -> None:
    token = login(client, "organizer")
    empty = {"seed": "", "max_new_tokens": "", "timeout": "", "max_retries": ""}
    estimate = client.post("/c/sample/jobs/estimate", data={**FORM, **empty, "csrf_token": token})
    assert estimate.status_code == 200, estimate.text[:300]
    hidden = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', estimate.text))
    assert (hidden["seed"], hidden["max_new_tokens"], hidden["timeout"], hidden["max_retries"]) == (
        "",
        "",
        "120.0",
        "6",
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("seed", "-1"),
        ("seed", str(2**31)),
        ("max_new_tokens", "0"),
        ("max_new_tokens", "1e9"),
        ("timeout", "0"),
        ("timeout", "nan"),
        ("timeout", "inf"),
        ("max_retries", "21"),
        ("max_retries", "-1"),
    ],
)
def test_hostile_options_are_refused(client: TestClient, name: str, value: str) -> None:
    token = login(client, "organizer")
    response = client.post("/c/sample/jobs/estimate", data={**FORM, name: value, "csrf_token": token})
    assert response.status_code in (400, 422), response.text[:300]
