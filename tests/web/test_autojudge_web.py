"""The web import form takes the TREC RAG / AutoJudge files; the rubric page shows importance and sub-nuggets."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.accounts.service import create_user
from app.config import get_settings
from app.db import session_scope
from app.models import BankItem, ExternalJudgment
from app.web.main import create_app
from tests.conftest import Database
from tests.web.conftest import PASSWORDS, login

BANK = {
    "query_id": "t1",
    "title_query": "Eiffel tower history",
    "nugget_bank": {
        "Who designed and built it?": {
            "question": "Who designed and built it?",
            "importance": "vital",
            "aggregator_type": "AND",
            "sub_nuggets": [{"question": "Who designed it?"}, {"claim": "Eiffel's company built it"}],
        }
    },
    "claim_bank": {"It is 330 m tall": {"claim": "It is 330 m tall", "importance": "okay"}},
}


@pytest.fixture
def interop_client(database: Database, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.delenv("RUBRIC_REDIS_URL", raising=False)
    get_settings.cache_clear()
    with session_scope() as session:
        create_user(session, "organizer", "organizer", PASSWORDS["organizer"])
    with TestClient(create_app()) as client:
        yield client


def _import(client: TestClient, token: str, files: list[tuple[str, str, bytes]], judge: str = "") -> str:
    response = client.post(
        f"/collections/import?csrf_token={token}",
        data={"name": "rag", "judge": judge},
        files=[(field, (name, content)) for field, name, content in files],
        follow_redirects=False,
    )
    assert response.status_code in (303, 400), response.text
    return response.text if response.status_code == 400 else ""


def test_import_form_nuggets_and_another_judge_then_the_rubric_page(
    interop_client: TestClient, database: Database
) -> None:
    token = login(interop_client, "organizer")
    form = interop_client.get("/").text
    assert all(f'name="{field}"' in form for field in ("requests", "nuggets", "reports", "judgments", "judge"))
    refused = _import(interop_client, token, [("nuggets", "mine.jsonl", b'{"query_id": "t1", "claim_bank": [7]}\n')])
    assert re.search(r"mine\.jsonl, line 1, field &#39;claim_bank\[0\]", refused), refused
    bank = json.dumps(BANK).encode() + b"\n"
    qrels = b"t1 0 doc-1 3\n"
    assert _import(interop_client, token, [("nuggets", "n.jsonl", bank), ("judgments", "umbrela.qrels", qrels)]) == ""
    with database.session() as session:
        assert session.scalars(select(ExternalJudgment.source)).all() == ["umbrela"]  # named by the file
    page = interop_client.get("/c/rag/rubric/t1").text
    assert 'data-testid="importance">vital<' in page and 'data-testid="importance">okay<' in page
    assert "all of:" in page and "Eiffel&#39;s company built it" in page


def test_the_editor_sets_an_items_importance(interop_client: TestClient, database: Database) -> None:
    token = login(interop_client, "organizer")
    assert _import(interop_client, token, [("nuggets", "n.jsonl", json.dumps(BANK).encode() + b"\n")]) == ""
    with database.session() as session:
        item = session.scalars(select(BankItem).where(BankItem.text == "It is 330 m tall")).one()
    form = {"action": "edit", "item_id": item.item_id, "text": item.text, "expected_text": item.text}
    for importance, shown in (("vital", "vital"), ("bogus", None)):
        response = interop_client.post(
            "/c/rag/rubric/t1/save",
            data=form | {"importance": importance},
            headers={"X-CSRF-Token": token},
            follow_redirects=False,
        )
        assert response.status_code == (303 if shown else 422), response.text[:300]
    with database.session() as session:
        now = session.scalars(select(BankItem.importance).where(BankItem.text == "It is 330 m tall")).all()
    assert sorted(now, key=str) == ["okay", "vital"]  # the old row stays in version 1, the new one is vital
