"""Organizers manage accounts: role, password reset, disable/enable, and the last-organizer guard (web and CLI)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli import app as cli
from app.web.main import create_app
from tests.conftest import Database
from tests.web.conftest import PASSWORDS, csrf_of, login

NEW_PASSWORD = "copper-lantern-77"


@pytest.fixture
def web(web_db_any: Database) -> Iterator[TestClient]:
    with TestClient(create_app()) as test_client:
        yield test_client


@pytest.fixture
def judge(web_db_any: Database) -> Iterator[TestClient]:
    """A second browser, signed in as the judge, whose session the organizer's actions must end or change."""
    with TestClient(create_app()) as test_client:
        login(test_client, "judge")
        yield test_client


def _signed_in(client: TestClient) -> bool:
    return client.get("/account", follow_redirects=False).status_code == 200


def _sign_in(name: str, password: str) -> tuple[int, str]:
    with TestClient(create_app()) as fresh:
        token = csrf_of(fresh.get("/login").text)
        response = fresh.post(
            "/login", data={"name": name, "password": password, "csrf_token": token}, follow_redirects=False
        )
        return response.status_code, response.text


def _act(web: TestClient, token: str, path: str, **form: str) -> tuple[int, str]:
    response = web.post(path, data={**form, "csrf_token": token}, follow_redirects=False)
    if response.status_code == 303:
        return 303, web.get(response.headers["location"]).text
    return response.status_code, response.text


def test_a_new_role_applies_at_the_next_request(web: TestClient, judge: TestClient) -> None:
    token = login(web, "organizer")
    assert judge.get("/c/sample/rubric/bees").status_code == 200
    status, page = _act(web, token, "/users/judge/role", role="viewer")
    assert status == 303 and "judge: role set" in page
    edit = judge.post("/c/sample/flag", data={"item_id": "x"}, headers={"X-CSRF-Token": csrf_of(judge.get("/").text)})
    assert edit.status_code == 403


def test_a_password_reset_ends_the_users_sessions(web: TestClient, judge: TestClient) -> None:
    token = login(web, "organizer")
    assert _signed_in(judge)
    assert _act(web, token, "/users/judge/password", password="short")[0] == 400
    assert _signed_in(judge)  # a refused reset changed nothing
    status, page = _act(web, token, "/users/judge/password", password=NEW_PASSWORD)
    assert status == 303 and "judge: password reset; their sessions ended" in page
    assert not _signed_in(judge)
    assert _sign_in("judge", PASSWORDS["judge"])[0] == 401
    assert _sign_in("judge", NEW_PASSWORD)[0] == 303


def test_a_disabled_user_cannot_sign_in_and_their_session_ends(web: TestClient, judge: TestClient) -> None:
    token = login(web, "organizer")
    status, page = _act(web, token, "/users/judge/disable")
    assert status == 303 and "✕ disabled since" in page
    assert not _signed_in(judge)
    status, text = _sign_in("judge", PASSWORDS["judge"])
    assert status == 403 and "this account is disabled" in text
    assert _sign_in("judge", "not-the-password-1")[0] == 401  # a wrong password says nothing about it
    assert _act(web, token, "/users/judge/enable")[0] == 303
    assert _sign_in("judge", PASSWORDS["judge"])[0] == 303


def test_the_last_organizer_cannot_demote_or_disable_themselves(web: TestClient) -> None:
    token = login(web, "organizer")
    for path, form in (("/users/organizer/role", {"role": "judge"}), ("/users/organizer/disable", {})):
        status, page = _act(web, token, path, **form)
        assert status == 409 and "organizer is the last organizer" in page, page[:300]
    assert _signed_in(web)
    assert _act(web, token, "/users/judge/role", role="organizer")[0] == 303
    status, page = _act(web, token, "/users/organizer/role", role="judge")
    assert status == 303 and "Signed in as organizer (judge)" in page


@pytest.mark.parametrize(
    ("path", "form", "status", "message"),
    [
        ("/users/judge/role", {"role": "root"}, 400, "role must be one of"),
        ("/users/judge/password", {"password": "judge-judge-judge"}, 400, "must not contain the user name"),
        ("/users/nobody/disable", {}, 404, "no user &#39;nobody&#39;"),
        ("/users/nobody/role", {"role": "judge"}, 404, "no user"),
    ],
)
def test_refusals_say_why(client: TestClient, path: str, form: dict[str, str], status: int, message: str) -> None:
    token = login(client, "organizer")
    response = client.post(path, data={**form, "csrf_token": token})
    assert response.status_code == status and message in response.text, response.text[:300]
    assert 'role="alert"' in response.text


def test_the_cli_manages_users(web_db_any: Database) -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["user", "set-role", "JUDGE", "organizer"]).exit_code == 0
    assert runner.invoke(cli, ["user", "reset-password", "judge", "--password", NEW_PASSWORD]).exit_code == 0
    assert runner.invoke(cli, ["user", "disable", "judge"]).exit_code == 0
    assert _sign_in("judge", NEW_PASSWORD)[0] == 403
    assert runner.invoke(cli, ["user", "enable", "judge"]).exit_code == 0
    assert _sign_in("judge", NEW_PASSWORD)[0] == 303
    for args, message in (
        (["user", "set-role", "judge", "root"], "role must be one of"),
        (["user", "reset-password", "judge", "--password", "short"], "at least 10 characters"),
        (["user", "disable", "nobody"], "no user 'nobody'"),
    ):
        result = runner.invoke(cli, args)
        assert result.exit_code == 2 and message in result.output, result.output
    assert runner.invoke(cli, ["user", "set-role", "judge", "viewer"]).exit_code == 0
    last = runner.invoke(cli, ["user", "disable", "organizer"])
    assert last.exit_code == 2 and "the last organizer" in last.output
