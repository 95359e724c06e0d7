"""Sessions and accounts (issue finding 7), on SQLite and PostgreSQL: forged cookies, sign-out and
password change end sessions, sign-in backoff, the password policy, user names, the secret file."""

from __future__ import annotations

import json
import os
import stat
import time
from base64 import b64encode
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from itsdangerous import TimestampSigner
from typer.testing import CliRunner

from app.accounts.secret import read_or_create_secret
from app.accounts.service import create_user
from app.cli import app as cli
from app.config import get_settings
from app.db import session_scope
from app.errors import Conflict, Invalid
from app.web.main import create_app
from tests.conftest import Database
from tests.web.conftest import csrf_of

COOKIE = "rubric_session"
PASSWORD = {"organizer": "runs-the-show-3", "judge": "grades-cells-2"}


@pytest.fixture
def accounts_db(database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Database]:
    """Either database with an organizer and a judge; the secret file in tmp_path."""
    monkeypatch.delenv("RUBRIC_SECRET_KEY", raising=False)
    monkeypatch.delenv("RUBRIC_REDIS_URL", raising=False)
    monkeypatch.setenv("RUBRIC_SECRET_FILE", str(tmp_path / "secret"))
    get_settings.cache_clear()
    with session_scope() as session:
        for role, password in PASSWORD.items():
            create_user(session, role, role, password)
    yield database
    get_settings.cache_clear()


def configure(monkeypatch: pytest.MonkeyPatch, **settings: object) -> None:
    for name, value in settings.items():
        monkeypatch.setenv(f"RUBRIC_{name.upper()}", str(value))
    get_settings.cache_clear()


def sign_in(client: TestClient, name: str, password: str) -> int:
    token = csrf_of(client.get("/login").text)
    response = client.post(
        "/login", data={"name": name, "password": password, "csrf_token": token}, follow_redirects=False
    )
    return response.status_code


def users_page_status(app_client: TestClient, cookie: str) -> int:
    """GET /users with exactly this cookie (a fresh client: nothing else in its jar)."""
    fresh = TestClient(app_client.app)
    return fresh.get("/users", headers={"Cookie": f"{COOKIE}={cookie}"}, follow_redirects=False).status_code


def forge(key: str, data: dict[str, str]) -> str:
    return TimestampSigner(key).sign(b64encode(json.dumps(data).encode())).decode()


def test_forged_cookies_are_refused(accounts_db: Database, tmp_path: Path) -> None:
    client = TestClient(create_app())
    demo_key = "rubric-demo-" + str(tmp_path.resolve())
    assert users_page_status(client, forge(demo_key, {"user": "organizer"})) == 303
    # Even the real key opens nothing without a session that the server knows.
    real_key = (tmp_path / "secret").read_text().strip()
    assert users_page_status(client, forge(real_key, {"user": "organizer"})) == 303
    assert users_page_status(client, forge(real_key, {"sid": "guessed-session-id"})) == 303
    assert sign_in(client, "organizer", PASSWORD["organizer"]) == 303
    assert users_page_status(client, client.cookies[COOKIE]) == 200


def test_sign_out_ends_a_saved_cookie(accounts_db: Database) -> None:
    client = TestClient(create_app())
    assert sign_in(client, "organizer", PASSWORD["organizer"]) == 303
    saved = client.cookies[COOKIE]
    assert users_page_status(client, saved) == 200
    token = csrf_of(client.get("/users").text)
    assert client.post("/logout", headers={"X-CSRF-Token": token}, follow_redirects=False).status_code == 303
    assert users_page_status(client, saved) == 303


def test_a_password_change_ends_the_other_sessions(accounts_db: Database) -> None:
    app = create_app()
    laptop, phone = TestClient(app), TestClient(app)
    for device in (laptop, phone):
        assert sign_in(device, "organizer", PASSWORD["organizer"]) == 303
    phone_cookie = phone.cookies[COOKIE]
    token = csrf_of(laptop.get("/account").text)
    weak = laptop.post(
        "/account/password",
        data={"current_password": PASSWORD["organizer"], "new_password": "password123", "csrf_token": token},
    )
    assert weak.status_code == 400 and users_page_status(phone, phone_cookie) == 200
    changed = laptop.post(
        "/account/password",
        data={"current_password": PASSWORD["organizer"], "new_password": "a-brand-new-secret", "csrf_token": token},
    )
    assert changed.status_code == 200, changed.text
    assert users_page_status(phone, phone_cookie) == 303  # the other session ended
    assert laptop.get("/users", follow_redirects=False).status_code == 200  # this one did not
    assert sign_in(TestClient(app), "organizer", PASSWORD["organizer"]) == 401
    assert sign_in(TestClient(app), "organizer", "a-brand-new-secret") == 303


def test_wrong_passwords_are_throttled_then_the_lock_out_ends(
    accounts_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure(
        monkeypatch,
        login_max_failures=5,
        login_max_failures_per_address=10_000,
        login_lockout_seconds=4,
        login_lockout_max_seconds=4,
    )
    first, second = TestClient(create_app()), TestClient(create_app())  # two workers, one database
    statuses = [sign_in(first if i % 2 else second, "judge", f"wrong-guess-{i}") for i in range(100)]
    assert statuses[:4] == [401] * 4 and statuses.count(429) >= 90, statuses
    token = csrf_of(first.get("/login").text)
    right = first.post("/login", data={"name": "judge", "password": PASSWORD["judge"], "csrf_token": token})
    assert right.status_code == 429 and 1 <= int(right.headers["Retry-After"]) <= 4
    # A name that does not exist is throttled the same way: the lock-out reveals nothing.
    ghost = [sign_in(first, "nobody-here", f"wrong-guess-{i}") for i in range(10)]
    assert ghost[:4] == [401] * 4 and ghost[5:] == [429] * 5
    time.sleep(int(right.headers["Retry-After"]) + 0.5)
    assert sign_in(second, "judge", PASSWORD["judge"]) == 303


def test_the_address_is_throttled_across_names(accounts_db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    configure(monkeypatch, login_max_failures=1_000, login_max_failures_per_address=6, login_lockout_seconds=60)
    client = TestClient(create_app())
    statuses = [sign_in(client, f"name-{i}", "wrong-guess-x") for i in range(8)]
    assert statuses[:5] == [401] * 5 and statuses[6:] == [429] * 2
    assert sign_in(client, "organizer", PASSWORD["organizer"]) == 429


@pytest.mark.parametrize(
    "password",
    [
        "12345678",
        "password",
        "organizer",
        "Organizer!",
        "my-organizer-pw",
        "rezinagro-xyz",
        "Password123!",
        "1234567890",
        "qwertyuiop",
        "aaaaaaaaaaaa",
        "short",
    ],
)
def test_the_password_policy_refuses(accounts_db: Database, password: str) -> None:
    with pytest.raises(Invalid), session_scope() as session:  # the policy speaks before the name clash
        create_user(session, "organizer", "viewer", password)


def test_the_policy_applies_on_the_web_and_a_good_password_passes(accounts_db: Database) -> None:
    client = TestClient(create_app())
    assert sign_in(client, "organizer", PASSWORD["organizer"]) == 303
    token = csrf_of(client.get("/users").text)
    for password in ("12345678", "password", "newbie-secret-1", "newbie"):
        form = {"name": "newbie", "role": "viewer", "password": password, "csrf_token": token}
        assert client.post("/users", data=form).status_code == 400, password
    form = {"name": "newbie", "role": "viewer", "password": "river-stone-kettle", "csrf_token": token}
    assert client.post("/users", data=form, follow_redirects=False).status_code == 303
    assert sign_in(TestClient(client.app), "NEWBIE", "river-stone-kettle") == 303  # names ignore case


@pytest.mark.parametrize(
    "name", ["", "   ", "x" * 100_000, "bad\x00name", "tab\tname", "line\nbreak", "bell\x07", "ünï", "a b", "x" * 65]
)
def test_bad_user_names_are_refused_with_400(accounts_db: Database, name: str) -> None:
    client = TestClient(create_app())
    assert sign_in(client, "organizer", PASSWORD["organizer"]) == 303
    token = csrf_of(client.get("/users").text)
    form = {"name": name, "role": "viewer", "password": "river-stone-kettle", "csrf_token": token}
    response = client.post("/users", data=form)
    assert response.status_code == 400, response.text[:300]


def test_user_names_are_unique_whatever_the_case(accounts_db: Database) -> None:
    client = TestClient(create_app())
    assert sign_in(client, "organizer", PASSWORD["organizer"]) == 303
    token = csrf_of(client.get("/users").text)
    form = {"name": " Judge ", "role": "viewer", "password": "river-stone-kettle", "csrf_token": token}
    assert client.post("/users", data=form).status_code == 409
    with pytest.raises(Conflict), session_scope() as session:
        create_user(session, "JUDGE", "viewer", "river-stone-kettle")


def test_the_cli_refuses_bad_names_and_passwords_with_exit_2(accounts_db: Database) -> None:
    runner = CliRunner()
    for name, password in (("bad\tname", "river-stone-kettle"), ("fine.name", "password1"), ("judge", "river-kettle")):
        result = runner.invoke(cli, ["user", "add", name, "--password", password])
        assert result.exit_code == 2, (name, password, result.output)
    assert runner.invoke(cli, ["user", "add", "fine.name", "--password", "river-stone-kettle"]).exit_code == 0


def test_the_secret_file_is_private_and_sessions_survive_a_restart(accounts_db: Database, tmp_path: Path) -> None:
    before = TestClient(create_app())
    secret = tmp_path / "secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and len(secret.read_text().strip()) == 64
    assert sign_in(before, "organizer", PASSWORD["organizer"]) == 303
    cookie = before.cookies[COOKIE]
    after = TestClient(create_app())  # a restart, or a second worker
    assert secret.read_text().strip() == read_or_create_secret(secret)
    assert users_page_status(after, cookie) == 200


def test_a_configured_key_is_used_and_no_file_is_written(
    accounts_db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure(monkeypatch, secret_key="k" * 40)
    client = TestClient(create_app())
    assert not (tmp_path / "secret").exists()
    assert sign_in(client, "organizer", PASSWORD["organizer"]) == 303
    assert users_page_status(client, client.cookies[COOKIE]) == 200


def test_the_default_secret_lies_next_to_the_sqlite_database(
    sqlite_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RUBRIC_SECRET_KEY", raising=False)
    monkeypatch.delenv("RUBRIC_SECRET_FILE", raising=False)
    get_settings.cache_clear()
    create_app()
    database_file = Path(sqlite_db.url.removeprefix("sqlite:///"))
    secret = database_file.with_name(database_file.name + ".secret")
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
