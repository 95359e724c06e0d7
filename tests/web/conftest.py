"""Web fixtures: the sample collection, graded by the default grader, with one user per role."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.accounts.service import create_user
from app.config import get_settings
from app.db import session_scope
from app.web.main import create_app
from tests.conftest import Database, PostgresServer, Seeded, restore_seeded
from tests.grading.conftest import import_sample
from tests.jobs.helpers import launch, wait_job

PASSWORDS = {"viewer": "reads-the-grid-1", "judge": "grades-cells-2", "organizer": "runs-the-show-3"}


def seed_web(database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Database:
    """The sample collection graded by the default grader (embedded worker), with one user per role."""
    _embedded_mode(monkeypatch)
    import_sample(tmp_path)
    wait_job(database, launch(database))
    with session_scope() as session:
        for role, password in PASSWORDS.items():
            create_user(session, role, role, password)
    return database


def _embedded_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUBRIC_REDIS_URL", raising=False)
    get_settings.cache_clear()


def _copy_seeded(
    db: Database, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, server: PostgresServer | None
) -> Database:
    """``db`` becomes a copy of the session's seeded database of its backend: what ``seed_web`` would build."""
    seeded: Seeded = request.getfixturevalue(f"seeded_web_{db.backend}")
    restore_seeded(db, seeded, server)
    _embedded_mode(monkeypatch)
    return db


@pytest.fixture
def web_db(
    sqlite_db: Database,
    request: pytest.FixtureRequest,
    postgres_server: PostgresServer | None,
    monkeypatch: pytest.MonkeyPatch,
) -> Database:
    return _copy_seeded(sqlite_db, request, monkeypatch, postgres_server)


@pytest.fixture
def web_db_any(
    database: Database,
    request: pytest.FixtureRequest,
    postgres_server: PostgresServer | None,
    monkeypatch: pytest.MonkeyPatch,
) -> Database:
    """``web_db`` on SQLite and on PostgreSQL."""
    return _copy_seeded(database, request, monkeypatch, postgres_server)


@pytest.fixture
def client(web_db: Database) -> Iterator[TestClient]:
    with TestClient(create_app()) as test_client:
        yield test_client


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf-token" content="([^"]+)"', html)
    assert match, "page has no CSRF token"
    return match.group(1)


def login(client: TestClient, role: str) -> str:
    """Sign in as the user of ``role``; returns the session's CSRF token."""
    token = csrf_of(client.get("/login").text)
    response = client.post(
        "/login", data={"name": role, "password": PASSWORDS[role], "csrf_token": token}, follow_redirects=False
    )
    assert response.status_code == 303, response.text
    return csrf_of(client.get("/").text)
