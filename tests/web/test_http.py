"""HTTP tests against a real database: roles on every route, CSRF, escaping, edit conflicts."""

from __future__ import annotations

import json
import re

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.models import BankItem, GradeOverride, PoolEntry
from app.web.main import create_app
from tests.conftest import Database
from tests.web.conftest import PASSWORDS, csrf_of, login

Q = "bees"
ROLES = ("viewer", "judge", "organizer")

# (method, path template, the least role allowed, form data) — every route of the app must be listed.
ROUTES: list[tuple[str, str, str | None, dict[str, str]]] = [
    ("GET", "/", "viewer", {}),
    ("GET", "/login", None, {}),
    ("POST", "/login", None, {}),
    ("POST", "/logout", None, {}),
    ("GET", "/healthz", None, {}),
    ("GET", "/account", "viewer", {}),
    ("POST", "/account/password", "viewer", {"current_password": "wrong-one-here", "new_password": "x"}),
    ("GET", "/users", "organizer", {}),
    ("POST", "/users", "organizer", {"name": "newbie", "role": "viewer", "password": "a-long-password"}),
    ("POST", "/users/{user_name}/role", "organizer", {"role": "viewer"}),
    ("POST", "/users/{user_name}/password", "organizer", {"password": "a-fresh-long-secret"}),
    ("POST", "/users/{user_name}/disable", "organizer", {}),
    ("POST", "/users/{user_name}/enable", "organizer", {}),
    ("POST", "/collections/import", "organizer", {"name": "sample"}),
    ("GET", "/c/{name}", "viewer", {}),
    ("POST", "/c/{name}/primary-grader", "organizer", {"grader": "0"}),
    ("GET", "/c/{name}/rubric/{query_id:any}", "viewer", {}),
    ("POST", "/c/{name}/rubric/{query_id:any}/save", "judge", {"action": "add", "text": "Do bees sleep?"}),
    ("POST", "/c/{name}/drafts/{number}/accept", "judge", {}),
    ("GET", "/c/{name}/history", "viewer", {}),
    ("POST", "/c/{name}/revert/{number}", "judge", {}),
    ("GET", "/c/{name}/grid/{query_id:any}", "viewer", {}),
    ("POST", "/c/{name}/override", "judge", {"pool_entry": "1", "item_id": "ITEM", "rating": "5"}),
    ("POST", "/c/{name}/override/undo", "judge", {}),
    ("POST", "/c/{name}/flag", "judge", {"item_id": "ITEM"}),
    ("POST", "/c/{name}/unflag", "judge", {"item_id": "ITEM"}),
    ("GET", "/c/{name}/review", "viewer", {}),
    ("GET", "/c/{name}/review/stats", "viewer", {}),
    ("GET", "/c/{name}/leaderboard", "viewer", {}),
    ("GET", "/c/{name}/leaderboard.{fmt}", "viewer", {}),
    ("GET", "/c/{name}/qrels", "viewer", {}),
    ("GET", "/c/{name}/bundle.tar.gz", "viewer", {}),
    ("GET", "/c/{name}/compare", "viewer", {}),
    ("GET", "/c/{name}/compare.json", "viewer", {}),
    ("GET", "/c/{name}/agreement", "viewer", {}),
    ("GET", "/c/{name}/agreement.json", "viewer", {}),
    ("GET", "/c/{name}/oversight/{view}", "viewer", {}),
    ("GET", "/c/{name}/events", "viewer", {}),
    ("GET", "/c/{name}/jobs", "viewer", {}),
    ("POST", "/c/{name}/jobs/estimate", "organizer", {}),
    ("POST", "/c/{name}/jobs", "organizer", {"query_id": "aurora"}),
    ("POST", "/c/{name}/generate", "judge", {"query_id": "bees", "model": "/nonexistent"}),
    ("POST", "/jobs/{job_id}/cancel", "organizer", {}),
    ("GET", "/jobs/{job_id}", "viewer", {}),
    ("GET", "/jobs/{job_id}/row", "viewer", {}),
]
VALUES = {"name": "sample", "query_id": Q, "number": "1", "fmt": "json", "view": "bad", "job_id": "1"}
VALUES["user_name"] = "judge"  # a user the organizer may manage (never themselves: the last-organizer guard)


def _url(template: str, item_id: str) -> str:
    return re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: VALUES[m.group(1)], template)


def _api_routes() -> list[APIRoute]:
    routes = []
    for route in create_app().routes:
        nested = getattr(route, "original_router", None)  # routers included with include_router
        routes += [r for r in (nested.routes if nested else [route]) if isinstance(r, APIRoute)]
    return routes


def test_every_route_is_in_the_role_table() -> None:
    app_routes = {(m, r.path) for r in _api_routes() for m in r.methods}
    assert app_routes == {(m, p) for m, p, _, _ in ROUTES}


@pytest.mark.parametrize(("method", "path", "least", "data"), [r for r in ROUTES if r[2] is not None])
def test_roles_are_enforced_on_every_route(
    client: TestClient, web_db: Database, method: str, path: str, least: str, data: dict[str, str]
) -> None:
    with web_db.session() as session:
        item_id = session.scalars(select(BankItem.item_id)).first() or ""
    url = _url(path, item_id)
    form = {k: (item_id if v == "ITEM" else v) for k, v in data.items()}
    anonymous = client.request(
        method, url, data=form or None, headers={"X-CSRF-Token": _anon_token(client)}, follow_redirects=False
    )
    assert anonymous.status_code in (303, 401), f"{method} {url} let an anonymous user in"
    for role in ROLES:
        token = login(client, role)
        if path.endswith("/events"):
            continue  # a stream: its role check is the same dependency; not opened here
        response = client.request(
            method, url, data=form or None, headers={"X-CSRF-Token": token}, follow_redirects=False
        )
        allowed = ROLES.index(role) >= ROLES.index(least)
        if allowed:
            assert response.status_code != 403, f"{role} refused on {method} {url}: {response.text[:200]}"
        else:
            assert response.status_code == 403, f"{role} allowed on {method} {url}"
        client.post("/logout", headers={"X-CSRF-Token": token})


def _anon_token(client: TestClient) -> str:
    return csrf_of(client.get("/login").text)


def test_csrf_is_required_for_every_change(client: TestClient, web_db: Database) -> None:
    login(client, "judge")
    for headers in ({}, {"X-CSRF-Token": "forged"}):
        response = client.post(f"/c/sample/rubric/{Q}/save", data={"action": "add", "text": "Forged?"}, headers=headers)
        assert response.status_code == 403 and "CSRF" in response.text
    with web_db.session() as session:
        assert session.scalar(select(BankItem).where(BankItem.text == "Forged?")) is None
    wrong_login = client.post("/login", data={"name": "judge", "password": PASSWORDS["judge"]})
    assert wrong_login.status_code == 403


def test_session_cookie_is_httponly_and_samesite(web_db: Database) -> None:
    with TestClient(create_app()) as fresh:
        token = csrf_of(fresh.get("/login").text)
        response = fresh.post(
            "/login",
            data={"name": "viewer", "password": PASSWORDS["viewer"], "csrf_token": token},
            follow_redirects=False,
        )
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=lax" in cookie


def test_a_script_in_a_passage_renders_as_text(client: TestClient, web_db: Database, tmp_path) -> None:  # noqa: ANN001
    passage = {
        "paragraph_id": "evil",
        "text": "<script>alert('x')</script><img src=x onerror=alert(1)>",
        "paragraph_data": {
            "judgments": [],
            "rankings": [{"method": "weak-ranker", "paragraphId": "evil", "queryId": Q, "rank": 9, "score": 0.1}],
        },
    }
    path = tmp_path / "evil.jsonl"
    path.write_text(json.dumps([Q, [passage]]) + "\n")
    token = login(client, "organizer")
    with path.open("rb") as handle:
        response = client.post(
            "/collections/import",
            data={"name": "sample"},
            files={"passages": ("evil.jsonl", handle)},
            headers={"X-CSRF-Token": token},
            follow_redirects=False,
        )
    assert response.status_code == 303, response.text
    page = client.get(f"/c/sample/grid/{Q}").text
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page


def test_concurrent_edits_of_one_question_conflict(client: TestClient, web_db: Database) -> None:
    with web_db.session() as session:
        item = session.scalars(select(BankItem).where(BankItem.text == "What is the waggle dance?")).one()
    token = login(client, "judge")
    first = {"action": "edit", "item_id": item.item_id, "expected_text": item.text, "text": "What is the bee dance?"}
    assert client.post(f"/c/sample/rubric/{Q}/save", data=first, headers={"X-CSRF-Token": token}).status_code == 200
    second = {**first, "text": "What is the round dance?"}  # opened before the first save
    response = client.post(
        f"/c/sample/rubric/{Q}/save", data=second, headers={"X-CSRF-Token": token, "HX-Request": "true"}
    )
    assert response.status_code == 409
    assert "What is the bee dance?" in response.text and "What is the round dance?" in response.text
    with web_db.session() as session:
        texts = set(session.scalars(select(BankItem.text)))
    assert "What is the round dance?" not in texts


def test_bad_import_names_file_line_and_field_and_stores_nothing(
    client: TestClient, web_db: Database, tmp_path
) -> None:  # noqa: ANN001
    bad = tmp_path / "runs.txt"
    bad.write_text("bees Q0 bees-1 1 2.0 newrun\nbees Q0 bees-2 two 1.0 newrun\n")
    token = login(client, "organizer")
    with bad.open("rb") as handle:
        response = client.post(
            "/collections/import",
            data={"name": "sample"},
            files={"runs": ("runs.txt", handle)},
            headers={"X-CSRF-Token": token},
        )
    assert response.status_code == 400
    assert "runs.txt" in response.text and "line 2" in response.text and "rank" in response.text
    assert "newrun" not in client.get("/c/sample/jobs").text


def test_override_is_stored_apart_with_judge_and_time(client: TestClient, web_db: Database) -> None:
    with web_db.session() as session:
        entry = session.scalars(select(PoolEntry.id)).first()
        item = session.scalars(select(BankItem.item_id)).first()
    token = login(client, "judge")
    response = client.post(
        "/c/sample/override",
        data={"pool_entry": str(entry), "item_id": item, "rating": "5"},
        headers={"X-CSRF-Token": token},
    )
    assert response.status_code == 200 and response.json()["judge"] == "judge"
    with web_db.session() as session:
        stored = session.scalars(select(GradeOverride)).one()
        assert (stored.rating, stored.judge) == (5, "judge") and stored.created_at is not None
    bad = client.post(
        "/c/sample/override",
        data={"pool_entry": str(entry), "item_id": item, "rating": "9"},
        headers={"X-CSRF-Token": token},
    )
    assert bad.status_code == 400


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/c/sample",
        f"/c/sample/rubric/{Q}",
        f"/c/sample/grid/{Q}",
        "/c/sample/leaderboard",
        "/c/sample/agreement",
        "/c/sample/oversight/bad",
        "/c/sample/oversight/uncovered",
        "/c/sample/oversight/verify",
        "/c/sample/oversight/impact",
        "/c/sample/jobs",
        "/c/sample/history?a=1&b=1",
        "/c/sample/compare",
        "/c/sample/leaderboard.tsv",
        "/c/sample/leaderboard.tex",
        "/c/sample/qrels",
        "/jobs/1",
    ],
)
def test_pages_render_for_a_viewer(client: TestClient, path: str) -> None:
    login(client, "viewer")
    response = client.get(path)
    assert response.status_code == 200, response.text[:500]


def test_viewer_pages_have_no_editing_controls(client: TestClient) -> None:
    login(client, "viewer")
    page = client.get(f"/c/sample/rubric/{Q}").text
    assert "/save" not in page and "Draft questions" not in page
    assert "Launch grading" not in client.get("/c/sample/jobs").text


@pytest.mark.parametrize(
    ("view", "analysis", "rating"),
    [("bad", "bad-questions", "3"), ("uncovered", "uncovered", "5"), ("verify", "grading", "3")],
)
def test_oversight_views_reproduce_the_cli_analyses(client: TestClient, view: str, analysis: str, rating: str) -> None:
    from markupsafe import escape

    from tests.helpers import cli

    login(client, "viewer")
    url = f"/c/sample/oversight/{view}?min_rating={rating}&min_judgment=2"
    pages = [client.get(url).text]
    while 'rel="next"' in pages[-1]:  # the web pages the table (50 rows a page); read every page
        pages.append(client.get(f"{url}&page={len(pages) + 1}").text)
    page = "".join(pages)
    table = json.loads(
        cli("verify", "sample", analysis, "--min-rating", rating, "--min-judgment", "2", "--format", "json")
    )
    rows = table[0]["rows"]
    assert sum(p.split("<tbody>", 1)[1].count("<tr") for p in pages) == len(rows) > 0
    for row in rows:
        for value in row.values():
            assert str(escape(str(value))) in page


def test_leaderboard_shows_per_query_correlation_for_trec_measures(client: TestClient) -> None:
    login(client, "viewer")
    page = client.get("/c/sample/leaderboard?measure=P@20&min_rating=3").text
    assert 'data-testid="per-query"' in page
    assert page.count("<tr><td>bees</td>") + page.count("<tr><td>bread</td>") + page.count("<tr><td>aurora</td>") == 3
    assert 'data-testid="per-query"' not in client.get("/c/sample/leaderboard?measure=cover").text


def test_the_web_process_never_imports_torch() -> None:
    import subprocess
    import sys

    code = "import sys; from app.web.main import create_app; create_app(); print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
