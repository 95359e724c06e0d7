"""The agreement page's section on other judges' qrels: how to import one, the picker, the numbers of the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient

from app.web.main import create_app
from tests.conftest import Database
from tests.helpers import cli
from tests.test_external_judgments import _judge_qrels
from tests.web.conftest import login


def test_agreement_page_lists_judges_and_shows_the_clis_numbers(web_db_any: Database, tmp_path: Path) -> None:
    with TestClient(create_app()) as client:
        login(client, "viewer")
        empty = client.get("/c/sample/agreement")
        assert empty.status_code == 200 and 'data-testid="external-none"' in empty.text
        assert "--judgments-from NAME=FILE" in empty.text
        assert client.get("/c/sample/agreement", params={"judge": "umbrela"}).status_code == 404

        cli("import", "sample", "--judgments-from", f"umbrela={_judge_qrels(tmp_path)}")
        cli("import", "sample", "--judgments-from", f"second-opinion={_judge_qrels(tmp_path)}")
        page = client.get("/c/sample/agreement", params={"judge": "umbrela", "min_judgment": 2, "judge_measure": "P@5"})
        assert page.status_code == 200
        expected = json.loads(
            cli("agreement", "sample", "--against", "umbrela", "--min-judgment", "2", "--format=json")
        )
        pair = expected["judge_vs_manual"]
        row = f"<td>{pair['kappa']:.2f}</td><td>{pair['tp']}</td><td>{pair['fp']}</td><td>{pair['fn']}</td>"
        assert row in page.text and 'data-testid="external-board"' in page.text
        assert '<option value="second-opinion">second-opinion (21 judgments)</option>' in page.text
        judged = ("--measure", "P@5", "--judge", "umbrela", "--min-rating", "4")
        board = json.loads(cli("leaderboard", "sample", *judged, "--format", "json"))
        top = board["systems"][0]
        assert f'<th scope="row">{top["system"]}</th><td>{top["score"]:.4f}</td>' in page.text

        unknown = client.get("/c/sample/agreement", params={"judge": "gpt-judge"})
        assert unknown.status_code == 404 and "imported judges: second-opinion, umbrela" in unknown.text
        assert client.get("/c/sample/agreement", params={"judge_measure": "cover"}).status_code == 400
        assert client.get("/c/sample/agreement", params={"judge_measure": "P@0"}).status_code == 400
        assert client.get("/c/sample/agreement", params={"min_external": 0}).status_code == 422
        assert client.get("/c/sample/agreement", params={"judge": "j" * 201}).status_code == 422


def test_agreement_page_without_manual_judgments_says_so_instead_of_empty_tables(web_db: Database) -> None:
    """κ, the sweep and per-question κ need manual judgments: without any the page says so (a RAG collection)."""
    from sqlalchemy import delete

    from app.collections.revision import replace_judgments_token
    from app.collections.service import ensure_collection
    from app.db import session_scope
    from app.models import Judgment

    with TestClient(create_app()) as client:
        login(client, "viewer")
        assert 'data-testid="kappa-1"' in client.get("/c/sample/agreement").text
        with session_scope() as session:
            session.execute(delete(Judgment))
            # as every judgment writer must (app/collections/revision.py): kept judgments go by the token
            replace_judgments_token(session, ensure_collection(session, "sample").id)
        page = client.get("/c/sample/agreement").text
        assert 'data-testid="no-judgments"' in page and "--qrels FILE" in page
        assert 'data-testid="kappa-1"' not in page and 'data-testid="sweep"' not in page
        assert 'data-testid="calibration"' in page and 'data-testid="external"' in page
