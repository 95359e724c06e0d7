"""Two judges saving at once against a real server, on SQLite and PostgreSQL: no edit is ever lost.

Each round opens the rubric as both judges see it, then releases both saves at the same moment
(a barrier), over separate connections to a uvicorn subprocess with its own threadpool.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from app.collections.service import get_collection
from app.models import BankItem, Query
from app.rubrics.service import latest_version, version_item_pks
from tests.conftest import Database
from tests.web.live import live_server, prepare_sample, signed_in

ROUNDS = 20
JUDGES = {"ann": "judge", "bob": "judge"}


def _items(database: Database, query_id: str = "bees") -> dict[str, str]:
    """item id → text of the query's items in the newest version (what a fresh page shows)."""
    with database.session() as session:
        version = latest_version(session, get_collection(session, "sample"))
        pks = version_item_pks(session, version)
        rows = session.execute(
            select(BankItem.id, BankItem.item_id, BankItem.text)
            .join(Query, Query.id == BankItem.query_pk)
            .where(BankItem.id.in_(pks), Query.query_id == query_id)
        ).all()
    order = {pk: i for i, pk in enumerate(pks)}
    return {item_id: text for _, item_id, text in sorted(rows, key=lambda r: order[r[0]])}


def _version_count(database: Database) -> int:
    with database.session() as session:
        return int(latest_version(session, get_collection(session, "sample")).number)  # type: ignore[union-attr]


def _save_together(clients: list[httpx.Client], forms: list[dict[str, str]]) -> list[httpx.Response]:
    barrier = threading.Barrier(len(clients))

    def save(client: httpx.Client, form: dict[str, str]) -> httpx.Response:
        barrier.wait()
        return client.post("/c/sample/rubric/bees/save", data=form, headers={"HX-Request": "true"})

    with ThreadPoolExecutor(len(clients)) as pool:
        return list(pool.map(save, clients, forms))


@pytest.fixture
def judges(database: Database, tmp_path: Path) -> tuple[Database, list[httpx.Client]]:
    prepare_sample(database, tmp_path, JUDGES)
    with live_server(database) as base:
        clients = [signed_in(base, name) for name in JUDGES]
        yield database, clients  # type: ignore[misc]
        for client in clients:
            client.close()


def test_same_question_exactly_one_wins_and_the_other_sees_both_texts(
    judges: tuple[Database, list[httpx.Client]],
) -> None:
    database, clients = judges
    statuses: list[tuple[int, int]] = []
    for round_ in range(ROUNDS):
        item_id, text = next(iter(_items(database).items()))
        before = _version_count(database)
        wanted = [f"What is dance {round_}{judge}?" for judge in "ab"]
        forms = [{"action": "edit", "item_id": item_id, "expected_text": text, "text": w} for w in wanted]
        responses = _save_together(clients, forms)
        statuses.append((responses[0].status_code, responses[1].status_code))
        assert sorted(r.status_code for r in responses) == [200, 409], responses[0].text[:300]
        winner, loser = (0, 1) if responses[0].status_code == 200 else (1, 0)
        now = _items(database)
        assert wanted[winner] in now.values() and wanted[loser] not in now.values()
        assert _version_count(database) == before + 1
        conflict = responses[loser].text
        assert wanted[winner] in conflict and wanted[loser] in conflict
        assert "was edited by" in conflict and list(JUDGES)[winner] in conflict and "deleted" not in conflict
    assert all(max(pair) < 500 for pair in statuses)


def test_different_questions_are_both_kept(judges: tuple[Database, list[httpx.Client]]) -> None:
    database, clients = judges
    for round_ in range(ROUNDS):
        items = list(_items(database).items())
        (first_id, first_text), (second_id, second_text) = items[0], items[1]
        wanted = [f"Edited first {round_}?", f"Edited second {round_}?"]
        forms = [
            {"action": "edit", "item_id": first_id, "expected_text": first_text, "text": wanted[0]},
            {"action": "edit", "item_id": second_id, "expected_text": second_text, "text": wanted[1]},
        ]
        responses = _save_together(clients, forms)
        assert [r.status_code for r in responses] == [200, 200], [r.text[:300] for r in responses]
        texts = set(_items(database).values())
        assert set(wanted) <= texts, f"round {round_}: lost an edit, newest version holds {texts}"


def test_an_edit_without_expected_text_is_refused_and_changes_nothing(
    judges: tuple[Database, list[httpx.Client]],
) -> None:
    database, clients = judges
    before, version = _items(database), _version_count(database)
    item_id = next(iter(before))
    response = clients[0].post(
        "/c/sample/rubric/bees/save", data={"action": "edit", "item_id": item_id, "text": "Overwrite?"}
    )
    assert response.status_code == 400 and "expected_text" in response.text
    for action in ("delete", "move"):
        response = clients[0].post(
            "/c/sample/rubric/bees/save", data={"action": action, "item_id": item_id, "position": "1"}
        )
        assert response.status_code == 400 and "expected_text" in response.text
    assert _items(database) == before and _version_count(database) == version


def test_a_stale_delete_of_an_edited_question_says_edited_and_a_deleted_one_says_deleted(
    judges: tuple[Database, list[httpx.Client]],
) -> None:
    database, (ann, bob) = judges
    (first_id, first_text), (second_id, second_text) = list(_items(database).items())[:2]
    edit = {"action": "edit", "item_id": first_id, "expected_text": first_text, "text": "What is a bee dance?"}
    assert ann.post("/c/sample/rubric/bees/save", data=edit).status_code in (200, 303)
    stale = {"action": "delete", "item_id": first_id, "expected_text": first_text}
    response = bob.post("/c/sample/rubric/bees/save", data=stale, headers={"HX-Request": "true"})
    assert response.status_code == 409
    assert "was edited by ann" in response.text and "What is a bee dance?" in response.text

    gone = {"action": "delete", "item_id": second_id, "expected_text": second_text}
    assert ann.post("/c/sample/rubric/bees/save", data=gone).status_code in (200, 303)
    response = bob.post(
        "/c/sample/rubric/bees/save",
        data={"action": "edit", "item_id": second_id, "expected_text": second_text, "text": "Too late?"},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 409 and "was deleted" in response.text and "Too late?" in response.text
    assert "Too late?" not in _items(database).values()
