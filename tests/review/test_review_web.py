"""The review queue over HTTP (both databases) and from the CLI: one cell at a time, progress, exclusions."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.models import Collection, OverrideEvent
from app.review.flags import flag_item
from app.web.main import create_app
from tests.conftest import Database
from tests.helpers import cli
from tests.web.conftest import login


@pytest.fixture
def any_client(web_db_any: Database) -> Iterator[TestClient]:
    with TestClient(create_app()) as test_client:
        yield test_client


def _shown(html: str) -> tuple[int, str]:
    match = re.search(r'data-pool-entry="(\d+)" data-item="([^"]+)"', html)
    assert match, html[-2000:]
    return int(match.group(1)), match.group(2)


def _grader(html: str) -> str:
    match = re.search(r'data-grader="(\d+)"', html)
    assert match
    return match.group(1)


def test_a_judge_works_through_the_queue(any_client: TestClient, web_db_any: Database) -> None:
    token = login(any_client, "judge")
    page = any_client.get("/c/sample/review")
    assert page.status_code == 200
    first = _shown(page.text)
    assert "0 of 72 cells reviewed" in page.text and "Why this cell" in page.text
    accepted = any_client.post(
        "/c/sample/override",
        data={
            "pool_entry": first[0],
            "item_id": first[1],
            "action": "accept",
            "grader": _grader(page.text),
            "source": "queue",
        },
        headers={"X-CSRF-Token": token},
    )
    assert accepted.status_code == 200, accepted.text
    fragment = any_client.get("/c/sample/review", headers={"hx-request": "true"})
    assert fragment.text.lstrip().startswith('<section id="review-cell"')  # the named block only
    assert _shown(fragment.text) != first
    assert "1 of 72 cells reviewed" in fragment.text and "you: 1 rated (1 accepted, 0 changed)" in fragment.text
    skipped = any_client.get("/c/sample/review?offset=1", headers={"hx-request": "true"})
    assert _shown(skipped.text) not in (first, _shown(fragment.text))
    # the uniform sample: the same sequence on every load, reviewed cells left out
    sample = [_shown(any_client.get(f"/c/sample/review?mode=uniform&offset={k}").text) for k in range(3)]
    assert len(set(sample)) == 3 and first not in sample
    assert _shown(any_client.get("/c/sample/review?mode=uniform").text) == sample[0]
    stats = any_client.get("/c/sample/review/stats")
    assert stats.status_code == 200 and 'data-testid="judge-progress"' in stats.text
    with web_db_any.session() as session:
        (event,) = session.scalars(select(OverrideEvent)).all()
        assert (event.source, event.action, event.judge) == ("queue", "accept", "judge")


def test_viewers_see_the_cell_but_cannot_act(client: TestClient) -> None:
    login(client, "viewer")
    page = client.get("/c/sample/review")
    assert page.status_code == 200
    assert 'data-can-edit="no"' in page.text and "only judges can grade" in page.text
    assert re.search(r'data-action="accept"\s+disabled', page.text)


HOSTILE = [
    ("mode=bogus", 422),
    ("offset=-1", 422),
    ("offset=99999999999", 422),
    ("min_rating=6", 422),
    ("grader=999", 404),
    ("query=no-such-query", 404),
    ("pool_entry=99999&item_id=nope", 404),
    ("exclude=everyone", 422),
    ("query=%00", 422),
]


def test_hostile_parameters_are_refused(client: TestClient) -> None:
    login(client, "judge")
    answers = [(query, client.get(f"/c/sample/review?{query}").status_code) for query, _ in HOSTILE]
    assert answers == HOSTILE


def test_cli_review_next_and_stats(web_db: Database) -> None:
    first = json.loads(cli("review", "next", "sample", "--limit", "3", "--format", "json"))
    assert len(first["cells"]) == 3 and first["remaining"] == first["total"] == 72
    priorities = [c["priority"] for c in first["cells"]]
    assert priorities == sorted(priorities, reverse=True)
    uniform = json.loads(
        cli("review", "next", "sample", "--mode", "uniform", "--seed", "5", "--limit", "72", "--format", "json")
    )
    cells = [(c["pool_entry"], c["item_id"]) for c in uniform["cells"]]
    assert len(set(cells)) == 72 and uniform["seed"] == 5
    assert "cells left" not in cli("review", "next", "sample", "--limit", "1")  # the summary goes to stderr
    header, first_row = cli("review", "next", "sample", "--mode", "uniform", "--limit", "1").splitlines()[:2]
    assert header.endswith("row\titem of row") and "priority" not in header  # chance order: no priority columns
    assert first_row.endswith("\t1\t1 of 3")  # the sample's first row, its first of 3 items
    table = cli("review", "stats", "sample")
    assert "no cell graded by two judges yet" in table and "no agreement with the grader" in table
    stats = json.loads(cli("review", "stats", "sample", "--format", "json"))
    assert stats["progress"]["in_queue"] == 72 and stats["agreement"]["pairs"] == []
    assert "error: mode must be one of priority, uniform" in cli("review", "next", "sample", "--mode", "x", expect=2)
    assert "error:" in cli("review", "next", "sample", "--query", "nope", expect=2)


def test_flagged_questions_leave_the_queue(web_db: Database) -> None:
    cells = json.loads(cli("review", "next", "sample", "--limit", "72", "--format", "json"))["cells"]
    flagged = cells[0]["item_id"]
    with web_db.session() as session:
        collection = session.scalars(select(Collection)).one()
        flag_item(session, collection, flagged, judge="judge")
        session.commit()
    left = json.loads(cli("review", "next", "sample", "--limit", "72", "--format", "json"))
    assert left["remaining"] == 72 - sum(c["item_id"] == flagged for c in cells)
    assert flagged not in {c["item_id"] for c in left["cells"]}
