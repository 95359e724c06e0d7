"""Oversight views are paged (at most 50 rows, well under 1 MB a page) and filtered server-side."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from app.accounts.service import create_user
from app.db import session_scope
from app.oversight.service import PER_PAGE
from app.web.main import create_app
from tests.conftest import Database
from tests.helpers import oversight_rows
from tests.web.conftest import PASSWORDS, login

MB = 1_000_000


def _summary(html: str) -> tuple[int, int, int]:
    match = re.search(r"page (\d+) of (\d+) · (\d+) rows", html)
    assert match, "no pager"
    page, pages, total = match.groups()
    return int(page), int(pages), int(total)


def test_verify_pages_hold_at_most_50_rows_and_link_both_ways(client: TestClient) -> None:
    login(client, "viewer")
    first = client.get("/c/sample/oversight/verify?min_rating=3")
    assert first.status_code == 200
    page, pages, total = _summary(first.text)
    assert (page, pages) == (1, -(-total // PER_PAGE)) and total > PER_PAGE
    assert len(oversight_rows(first.text)) == PER_PAGE
    assert 'rel="prev"' not in first.text and 'rel="next"' in first.text
    last = client.get(f"/c/sample/oversight/verify?min_rating=3&page={pages}").text
    assert len(oversight_rows(last)) == total - (pages - 1) * PER_PAGE
    assert 'rel="prev"' in last and 'rel="next"' not in last
    # the links keep the settings and go through url_for
    link = re.search(r'rel="next" href="([^"]+)"', first.text)
    assert link and "min_rating=3" in link.group(1) and "page=2" in link.group(1)
    # past the last page: the last page, not an empty one
    assert _summary(client.get("/c/sample/oversight/verify?min_rating=3&page=999").text)[0] == pages


def test_filters_by_query_item_and_grade(client: TestClient) -> None:
    login(client, "viewer")
    everything = []
    url = "/c/sample/oversight/verify"
    pages = _summary(client.get(url).text)[1]
    for n in range(1, pages + 1):
        everything += oversight_rows(client.get(f"{url}?page={n}").text)
    query, item, grade = everything[0][0], everything[0][1], everything[0][4]
    by_query = oversight_rows(client.get(f"{url}?query={query}").text)
    assert by_query and all(r[0] == query for r in by_query)
    assert _summary(client.get(f"{url}?query={query}").text)[2] == sum(1 for r in everything if r[0] == query)
    by_item = oversight_rows(client.get(f"{url}?item={item}").text)
    assert by_item and all(r[1] == item for r in by_item)
    by_grade = client.get(f"{url}?grade={grade}").text
    assert _summary(by_grade)[2] == sum(1 for r in everything if r[4] == grade)
    assert all(r[4] == grade for r in oversight_rows(by_grade))
    assert _summary(client.get(f"{url}?query=no-such-query").text)[2] == 0
    # uncovered: grade filters the best rating; impact: query filters the items computed
    uncovered = oversight_rows(client.get("/c/sample/oversight/uncovered?min_rating=5&grade=4").text)
    assert all(r[3] == "4" for r in uncovered)
    impact = client.get(f"/c/sample/oversight/impact?query={query}").text
    assert oversight_rows(impact) and all(r[0] == query for r in oversight_rows(impact))


@pytest.mark.parametrize(
    "params", ["page=0", "page=-1", "page=10000001", "grade=6", "grade=-2", "grade=x", f"query={'q' * 201}"]
)
def test_out_of_bounds_paging_and_filters_are_refused(client: TestClient, params: str) -> None:
    login(client, "viewer")
    assert client.get(f"/c/sample/oversight/verify?{params}").status_code in (400, 422)


def test_empty_filters_mean_any(client: TestClient) -> None:
    login(client, "viewer")
    plain = _summary(client.get("/c/sample/oversight/verify").text)
    assert _summary(client.get("/c/sample/oversight/verify?query=&item=&grade=").text) == plain


def test_no_page_over_1_mb_on_dl19_dev(dev_sqlite_database: Database) -> None:
    with session_scope() as session:
        create_user(session, "viewer", "viewer", PASSWORDS["viewer"])
    with TestClient(create_app()) as client:
        login(client, "viewer")
        for view in ("verify", "bad", "uncovered"):
            first = client.get(f"/c/dl19/oversight/{view}?min_rating=3")
            assert first.status_code == 200, first.text
            pages = _summary(first.text)[1]
            for n in sorted({1, 2, pages}):
                page = client.get(f"/c/dl19/oversight/{view}?min_rating=3&page={n}")
                assert len(page.content) < MB, (view, n, len(page.content))
                assert len(oversight_rows(page.text)) <= PER_PAGE
        verify = _summary(client.get("/c/dl19/oversight/verify").text)
        assert verify[2] > PER_PAGE  # the unpaged table was many MB; it is now split
        query = oversight_rows(client.get("/c/dl19/oversight/verify").text)[0][0]
        impact = client.get(f"/c/dl19/oversight/impact?query={query}")
        assert impact.status_code == 200 and len(impact.content) < MB
        assert oversight_rows(impact.text) and all(r[0] == query for r in oversight_rows(impact.text))
