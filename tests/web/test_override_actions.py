"""Suggestion and response: set, accept, clear and undo a judge's grade, each logged; flags set and removed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.models import Grade, GradeOverride, ItemFlag, OverrideEvent
from app.web.main import create_app
from tests.conftest import Database
from tests.web.conftest import login


@pytest.fixture
def any_client(web_db_any: Database) -> Iterator[TestClient]:
    with TestClient(create_app()) as test_client:
        yield test_client


def _graded_cell(database: Database) -> tuple[int, str, int, int]:
    with database.session() as session:
        grade = session.scalars(select(Grade).where(Grade.self_rating.is_not(None)).order_by(Grade.id)).first()
        assert grade is not None
        return grade.pool_entry_pk, grade.item_id, grade.grader_pk, grade.self_rating


def _post(client: TestClient, token: str, path: str, **data: object) -> dict[str, object]:
    response = client.post(path, data={k: str(v) for k, v in data.items()}, headers={"X-CSRF-Token": token})
    assert response.status_code == 200, response.text
    return response.json()


def _stored(database: Database, entry: int, item: str) -> tuple[int, str] | None:
    with database.session() as session:
        row = session.scalar(
            select(GradeOverride).where(GradeOverride.pool_entry_pk == entry, GradeOverride.item_id == item)
        )
        return (row.rating, row.judge) if row else None


def test_set_accept_clear_and_undo_walk_back_exactly(any_client: TestClient, web_db_any: Database) -> None:
    entry, item, grader, model = _graded_cell(web_db_any)
    token = login(any_client, "judge")
    other = (model + 2) % 6
    state = _post(any_client, token, "/c/sample/override", pool_entry=entry, item_id=item, rating=other, grader=grader)
    assert (state["rating"], state["judge"], state["model_rating"]) == (other, "judge", model)
    assert state["at"] and state["event"]
    state = _post(
        any_client, token, "/c/sample/override", pool_entry=entry, item_id=item, action="accept", grader=grader
    )
    assert state["rating"] == model and _stored(web_db_any, entry, item) == (model, "judge")
    state = _post(any_client, token, "/c/sample/override", pool_entry=entry, item_id=item, action="clear")
    assert state["rating"] is None and _stored(web_db_any, entry, item) is None
    # Undo goes back one action at a time: clear → accept → set → nothing.
    assert _post(any_client, token, "/c/sample/override/undo")["rating"] == model
    assert _post(any_client, token, "/c/sample/override/undo")["rating"] == other
    assert _post(any_client, token, "/c/sample/override/undo")["rating"] is None
    assert _stored(web_db_any, entry, item) is None
    response = any_client.post("/c/sample/override/undo", headers={"X-CSRF-Token": token})
    assert response.status_code == 404 and "nothing to undo" in response.text
    with web_db_any.session() as session:
        events = session.scalars(select(OverrideEvent).order_by(OverrideEvent.id)).all()
        assert [(e.action, e.rating, e.previous_rating, e.undone) for e in events] == [
            ("set", other, None, True),
            ("accept", model, other, True),
            ("clear", None, model, True),
        ]
        assert {e.model_rating for e in events} == {model, None}  # clear was sent without the grader


def test_undo_never_overwrites_another_judges_grade(any_client: TestClient, web_db_any: Database) -> None:
    entry, item, _, _ = _graded_cell(web_db_any)
    judge = login(any_client, "judge")
    _post(any_client, judge, "/c/sample/override", pool_entry=entry, item_id=item, rating=1)
    with TestClient(create_app()) as second:
        organizer = login(second, "organizer")
        _post(second, organizer, "/c/sample/override", pool_entry=entry, item_id=item, rating=4)
        response = any_client.post("/c/sample/override/undo", headers={"X-CSRF-Token": judge})
        assert response.status_code == 409 and "organizer" in response.text
        assert _stored(web_db_any, entry, item) == (4, "organizer")
        # The organizer's own undo puts back the judge's grade, under the judge's name.
        assert _post(second, organizer, "/c/sample/override/undo")["judge"] == "judge"
    assert _stored(web_db_any, entry, item) == (1, "judge")


@pytest.mark.parametrize(
    ("data", "status"),
    [
        ({"rating": "9"}, 400),
        ({"rating": "-1"}, 400),
        ({}, 400),  # "set" needs a grade
        ({"action": "accept"}, 400),  # no grader shown: nothing to accept
        ({"action": "erase"}, 422),
        ({"rating": "1", "source": "elsewhere"}, 422),
        ({"rating": "1", "grader": "0"}, 422),
        ({"rating": "1", "item_id": "no-such-item"}, 404),
        ({"rating": "1", "pool_entry": "999999"}, 404),
    ],
)
def test_hostile_override_values_are_clear_4xx(
    client: TestClient, web_db: Database, data: dict[str, str], status: int
) -> None:
    entry, item, _, _ = _graded_cell(web_db)
    token = login(client, "judge")
    form = {"pool_entry": str(entry), "item_id": item, **data}
    response = client.post("/c/sample/override", data=form, headers={"X-CSRF-Token": token})
    assert response.status_code == status, response.text
    assert _stored(web_db, entry, item) is None


def test_flag_then_unflag(any_client: TestClient, web_db_any: Database) -> None:
    _, item, _, _ = _graded_cell(web_db_any)
    token = login(any_client, "judge")
    assert _post(any_client, token, "/c/sample/flag", item_id=item, reason="off-topic")["flagged"] is True
    with web_db_any.session() as session:
        flag = session.scalars(select(ItemFlag)).one()
        assert (flag.item_id, flag.flagged_by, flag.reason) == (item, "judge", "off-topic")
    assert _post(any_client, token, "/c/sample/unflag", item_id=item)["flagged"] is False
    with web_db_any.session() as session:
        assert session.scalars(select(ItemFlag)).all() == []
    missing = any_client.post("/c/sample/flag", data={"item_id": "nope"}, headers={"X-CSRF-Token": token})
    assert missing.status_code == 404
