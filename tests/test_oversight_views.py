"""Oversight views (issue 11 §5): one analysis per view, paged server-side, the same data in the CLI and the web.

On dl19-dev: each view's whole table equals the direct computation of app/evaluation/oversight.py
over the collection read whole (the slow, obvious way the views used to take); ``rubric verify
… --page N --format json`` equals the web page /c/dl19/oversight/VIEW?page=N, row for row.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from markupsafe import escape
from sqlalchemy import select

from app.accounts.service import create_user
from app.collections import queries
from app.collections.graders import resolve_grader
from app.collections.revision import upsert_grades
from app.collections.service import get_collection
from app.db import session_scope
from app.evaluation import oversight
from app.leaderboards.service import load_evaluation_data
from app.models import Grade
from app.oversight.service import CLI_ANALYSES, PER_PAGE, RowFilter, Thresholds, oversight_page
from app.rubrics.service import latest_version
from app.web.main import create_app
from tests.conftest import Database
from tests.helpers import cli, oversight_rows
from tests.web.conftest import PASSWORDS, login


@pytest.fixture
def dev_db(dev_database: Database) -> Database:
    """A private copy of the session's dl19-dev import (tests/conftest.py), on each backend, and a viewer."""
    with session_scope() as session:
        create_user(session, "viewer", "viewer", PASSWORDS["viewer"])
    return dev_database


@pytest.fixture
def dev_sqlite(dev_sqlite_database: Database) -> Database:
    """dl19-dev on SQLite only: for the tests that read through the same queries as those run on both."""
    with session_scope() as session:
        create_user(session, "viewer", "viewer", PASSWORDS["viewer"])
    return dev_sqlite_database


@pytest.fixture
def client(dev_sqlite: Database) -> Iterator[TestClient]:
    with TestClient(create_app()) as test_client:
        login(test_client, "viewer")
        yield test_client


def _direct(view: str, thresholds: Thresholds) -> list[tuple[Any, ...]]:
    """The view's whole table from the pure analyses over every grade, answer, judgment and text."""
    with session_scope() as session:
        collection = get_collection(session, "dl19")
        data = load_evaluation_data(session, collection, model=None, prompt_class=None, grader_id=None)
        bank = queries.load_bank(session, latest_version(session, collection))
        judgments = queries.load_judgments(session, data.pool)
        r, j = thresholds.min_rating, thresholds.min_judgment
        if view == "verify":
            answers = queries.load_answers(session, data.pool, data.grader.id)
            return [
                (q.query_id, q.item.item_id, q.item.text, row.passage_id, row.rating, " | ".join(row.answers))
                for q in oversight.verify_grading(bank, data.graded, answers)
                for row in q.rows
            ]
        if view == "bad":
            per_query: dict[str, int] = {}
            rows = []
            for item in oversight.bad_questions(data.graded, judgments, bank, min_judgment=j, min_rating=r):
                if item.text is None:  # no longer in the rubric: the view lists the latest version's items
                    continue
                per_query[item.query_id] = per_query.get(item.query_id, 0) + 1
                if per_query[item.query_id] <= 20:
                    rows.append((item.query_id, item.item_id, item.count, item.text or ""))
            return rows
        texts = queries.load_texts(session, collection)
        return [
            (p.query_id, p.passage_id, p.worst_judgment, p.best_rating, p.text)
            for p in oversight.uncovered_passages(data.graded, judgments, texts, min_judgment=j, min_rating=r)
        ]


def _page(view: str, **kwargs: Any) -> Any:
    with session_scope() as session:
        collection = get_collection(session, "dl19")
        return oversight_page(session, collection, view, resolve_grader(session, collection), **kwargs)


@pytest.mark.parametrize("view", ["verify", "bad", "uncovered"])
def test_views_equal_the_direct_analyses(dev_db: Database, view: str) -> None:
    for thresholds in (Thresholds(4, 2), Thresholds(3, 1)):
        expected = _direct(view, thresholds)
        whole = _page(view, thresholds=thresholds, per_page=None)
        assert list(whole.rows) == expected and whole.total == len(expected) > 0
        # a filtered page is that slice of the filtered whole table
        query, item = expected[-1][0], expected[-1][1]
        grade_column = {"verify": 4, "uncovered": 3}.get(view)
        grade = None if grade_column is None else expected[-1][grade_column]
        for filters in (RowFilter(query=query), RowFilter(item=item), RowFilter(query, None, grade)):
            kept = [row for row in expected if _matches(view, row, filters)]
            last = max(1, -(-len(kept) // PER_PAGE))
            for page in sorted({1, last}):
                shown = _page(view, thresholds=thresholds, filters=filters, page=page)
                assert shown.total == len(kept) and shown.pages == last
                expected_rows = kept[(page - 1) * PER_PAGE : page * PER_PAGE]
                assert [row[:3] for row in shown.rows] == [row[:3] for row in expected_rows]


def _matches(view: str, row: tuple[Any, ...], filters: RowFilter) -> bool:
    grade_column = {"verify": 4, "uncovered": 3}.get(view)
    return (
        filters.query in (None, row[0])
        and (filters.item is None or view == "uncovered" or row[1] == filters.item)
        and (filters.grade is None or grade_column is None or row[grade_column] == filters.grade)
    )


def _item_text_after_item(columns: list[str]) -> list[int]:
    order = [i for i, c in enumerate(columns) if c != "item_text"]
    if "item_text" in columns:
        order.insert(order.index(columns.index("item")) + 1, columns.index("item_text"))
    return order


def _web_summary(html: str) -> tuple[int, int, int]:
    match = re.search(r"page (\d+) of (\d+) · (\d+) rows", html)
    assert match, "no pager"
    page, pages, total = match.groups()
    return int(page), int(pages), int(total)


@pytest.mark.parametrize("view", sorted(CLI_ANALYSES))
def test_cli_json_equals_the_web_page(client: TestClient, view: str) -> None:
    first = json.loads(cli("verify", "dl19", CLI_ANALYSES[view], "--page", "1", "--format", "json"))
    query = first["rows"][0][0]
    cases: list[dict[str, Any]] = [{"page": 2}, {"query": query}, {"query": query, "page": 9999}]
    if view in ("verify", "uncovered"):
        cases.append({"grade": first["rows"][0][4 if view == "verify" else 3], "min_rating": 3, "min_judgment": 1})
    if view != "uncovered":
        cases.append({"item": first["rows"][0][1]})
    for params in [{}, *cases]:
        args = [f"--{key.replace('_', '-')}={value}" for key, value in {"page": 1, **params}.items()]
        page = json.loads(cli("verify", "dl19", CLI_ANALYSES[view], *args, "--format", "json"))
        response = client.get(f"/c/dl19/oversight/{view}", params=params)
        assert response.status_code == 200, response.text
        html = response.text
        assert _web_summary(html) == (page["page"], page["pages"], page["total"]), params
        # the action column is the web's own; the data columns are the CLI's, cell for cell (the question
        # cell holds the item and its text, so the web shows item_text right after item)
        order = _item_text_after_item(page["columns"])
        assert [row[: len(page["columns"])] for row in oversight_rows(html)] == [
            [str(escape(str(row[i]))) for i in order] for row in page["rows"]
        ], params
        assert f'<option value="{page["grader"]["id"]}" selected' in html
        assert page["view"] == view and page["analysis"] == CLI_ANALYSES[view]
        assert len(page["rows"]) <= PER_PAGE and len(response.content) < 1_000_000


def test_impact_defaults_to_the_first_query(client: TestClient) -> None:
    page = json.loads(cli("verify", "dl19", "impact", "--page", "1", "--format", "json"))
    with session_scope() as session:
        from app.oversight.service import query_choices

        first = query_choices(session, get_collection(session, "dl19"))[0]
    assert page["filters"]["query"] == first and {row[0] for row in page["rows"]} == {first}
    html = client.get("/c/dl19/oversight/impact").text
    assert f'name="query" maxlength="200" list="query-ids" value="{first}"' in html


def test_cli_refuses_bad_filters(dev_sqlite: Database) -> None:
    assert "--grade" in cli("verify", "dl19", "grading", "--grade", "6", expect=2)
    assert "--page" in cli("verify", "dl19", "grading", "--page", "0", expect=2)
    assert "error:" in cli("verify", "dl19", "grading", "--query", "q" * 201, expect=2)
    assert "error:" in cli("verify", "dl19", "nothing", expect=2)
    assert "error:" in cli("verify", "dl19", "grading", "--grader", "999999", expect=2)


def test_verify_follows_new_answers(dev_db: Database) -> None:
    """The answered flags are kept in memory: a grade written later (its answer emptied) leaves the view."""
    first = _page("verify", per_page=None)
    query, item, passage = first.rows[0][0], first.rows[0][1], first.rows[0][3]
    with session_scope() as session:
        collection = get_collection(session, "dl19")
        keys = queries.pool_keys(session, collection).keys
        entry = next(pk for pk, pair in keys.items() if pair == (query, passage))
        grade = session.scalars(select(Grade).where(Grade.pool_entry_pk == entry, Grade.item_id == item)).one()
        row = {
            "grader_pk": grade.grader_pk,
            "pool_entry_pk": entry,
            "item_id": item,
            "extracted_answer": "",
            "raw_answer": "",
            "self_rating": grade.self_rating,
            "correct": grade.correct,
        }
        upsert_grades(session, [row], update=["extracted_answer", "raw_answer"])
    after = _page("verify", per_page=None)
    assert after.total == first.total - 1
    assert (query, item, passage) not in {(r[0], r[1], r[3]) for r in after.rows}
