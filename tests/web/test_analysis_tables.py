"""Analysis tables name an item by its question (with the query id), list only the rubric's items, and show flags."""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient
from markupsafe import escape

from app.web.main import create_app
from tests.conftest import Database
from tests.helpers import cli
from tests.web.conftest import login

LOW = ("--min-rating", "1", "--min-judgment", "3")  # thresholds that make the sample's spurious list long


def _bad_questions() -> list[dict[str, Any]]:
    return json.loads(cli("verify", "sample", "bad-questions", *LOW, "--format", "json"))[0]["rows"]


def _agreement() -> dict[str, Any]:
    return json.loads(
        cli("agreement", "sample", "--sweep", "--min-answers", "1", "--min-judgment", "2", "--format", "json")
    )


def test_item_text_and_only_the_rubrics_items_in_cli_json_and_pages(web_db_any: Database) -> None:
    before = _bad_questions()
    assert before and all(row["item_text"] for row in before)
    removed = before[0]
    kappas = _agreement()["per_item"]
    assert any(r["item_id"] == removed["item"] for r in kappas) and all(r["item_text"] for r in kappas)
    with TestClient(create_app()) as client:
        token = login(client, "judge")
        saved = client.post(
            f"/c/sample/rubric/{removed['query']}/save",
            data={"action": "delete", "item_id": removed["item"], "expected_text": removed["item_text"]},
            headers={"X-CSRF-Token": token},
        )
        assert saved.status_code == 200, saved.text[:300]
        # the CLI JSON: the removed question is gone, the others keep their rows and texts
        after = _bad_questions()
        assert removed["item"] not in {row["item"] for row in after}
        assert {row["item"] for row in after} == {row["item"] for row in before} - {removed["item"]}
        agreement = _agreement()
        assert removed["item"] not in {r["item_id"] for r in agreement["per_item"]}
        assert agreement == client.get("/c/sample/agreement.json").json()
        # the pages: the question (full text in the title), never the item hash as the cell's text
        bad = client.get("/c/sample/oversight/bad", params={"min_rating": 1, "min_judgment": 3}).text
        table = bad.split('data-testid="oversight"', 1)[1].split("</table>", 1)[0]
        assert "<th>question</th>" in table and "<th>item_text</th>" not in table
        assert f'data-item="{removed["item"]}"' not in table
        for row in after:
            assert f'data-item="{row["item"]}"' in table and f'title="{escape(row["item_text"])}"' in table
            assert f">{row['item']}<" not in table
        page = client.get("/c/sample/agreement").text
        items = page.split('data-testid="per-item"', 1)[1].split("</table>", 1)[0]
        shown = agreement["per_item"][0]
        assert f'title="{escape(shown["item_text"])}"' in items and f"<code>{shown['item_id']}</code>" not in items
        assert f'data-item="{removed["item"]}"' not in items


def test_flag_status_and_the_unflag_round_trip(client: TestClient) -> None:
    item = _bad_questions()[0]["item"]
    params = {"min_rating": 1, "min_judgment": 3}
    token = login(client, "judge")

    def flag_cell(path: str, **query: Any) -> str:
        html = client.get(path, params=query).text
        return html.split(f'data-flag-item="{item}"', 1)[1].split("</td>", 1)[0]

    cell = flag_cell("/c/sample/oversight/bad", **params)
    assert "not flagged" in cell and 'data-flag-form="unflag" hidden' in cell
    answer = client.post("/c/sample/flag", data={"item_id": item}, headers={"X-CSRF-Token": token})
    assert answer.json() == {"item_id": item, "flagged": True, "by": "judge"}
    for path, query in (("/c/sample/oversight/bad", params), ("/c/sample/agreement", {})):
        cell = flag_cell(path, **query)
        assert "flagged by you · " in cell and 'data-flag-form="flag" hidden' in cell
        assert 'data-flag-form="unflag">' in cell  # the unflag button shows
    login(client, "organizer")
    assert "flagged by judge · " in flag_cell("/c/sample/oversight/bad", **params)
    login(client, "viewer")  # a viewer reads the status and gets no buttons
    cell = flag_cell("/c/sample/oversight/bad", **params)
    assert "flagged by judge" in cell and "<form" not in cell
    token = login(client, "judge")
    answer = client.post("/c/sample/unflag", data={"item_id": item}, headers={"X-CSRF-Token": token})
    assert answer.json()["flagged"] is False
    assert "not flagged" in flag_cell("/c/sample/oversight/bad", **params)
