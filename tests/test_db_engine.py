"""The engines of app/db.py: the server options every PostgreSQL connection carries."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from app.db import make_engine
from tests.conftest import PostgresServer, _postgres_database


def _show(url: str, setting: str) -> str:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return str(connection.execute(text(f"SHOW {setting}")).scalar_one())
    finally:
        engine.dispose()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer | None, postgres_template: str | None) -> str:
    if postgres_server is None or postgres_template is None:
        pytest.skip("PostgreSQL server binaries not installed (set RUBRIC_REQUIRE_POSTGRES=1 to make this fail)")
    return _postgres_database(postgres_server, postgres_template)


@pytest.mark.postgres
def test_postgres_connections_run_without_jit(postgres_url: str) -> None:
    assert _show(postgres_url, "jit") == "off"


@pytest.mark.postgres
def test_the_urls_own_server_options_are_kept_and_win(postgres_url: str) -> None:
    url = f"{postgres_url}?options=-c%20statement_timeout%3D12345%20-c%20jit%3Don"
    assert _show(url, "statement_timeout") == "12345ms"
    assert _show(url, "jit") == "on"
