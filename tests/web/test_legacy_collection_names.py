"""Collections stored before the naming rule: the list still renders, and ``rubric collections rename`` fixes them.

The rows are inserted directly, as an old version of the app stored them (it did not check names).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert, select

from app.accounts.service import create_user
from app.models import Collection
from app.web.main import create_app
from tests.conftest import Database
from tests.helpers import cli
from tests.web.conftest import PASSWORDS, login

LEGACY = ("team/a", "a b?c#d", "../up", "quote'd")
HREF = re.compile(r'href="(/c/[^"]*)"')


@pytest.fixture
def legacy(database: Database) -> Database:
    """Collection ``fine`` and the legacy names, plus a viewer."""
    with database.session() as session:
        session.execute(insert(Collection), [{"name": n} for n in ("fine", *LEGACY)])
        create_user(session, "viewer", "viewer", PASSWORDS["viewer"])
        session.commit()
    return database


@pytest.fixture
def legacy_client(legacy: Database) -> Iterator[TestClient]:
    with TestClient(create_app()) as client:
        login(client, "viewer")
        yield client


def _names(db: Database) -> set[str]:
    with db.session() as session:
        return set(session.scalars(select(Collection.name)))


def test_the_list_renders_legacy_names_with_their_rename_command_and_no_link(legacy_client: TestClient) -> None:
    response = legacy_client.get("/")
    assert response.status_code == 200, response.text[:300]
    page = html.unescape(response.text)
    assert HREF.findall(response.text) == ["/c/fine"]  # the only collection link, and it works
    assert legacy_client.get("/c/fine").status_code == 200
    assert response.text.count('data-testid="needs-rename"') == len(LEGACY)
    assert "rubric collections rename team/a NEW-NAME" in page
    assert "rubric collections rename 'a b?c#d' NEW-NAME" in page
    assert "rubric collections rename 'quote'\"'\"'d' NEW-NAME" in page  # shell-quoted, pastes as is


def test_rename_gives_a_legacy_collection_its_pages(legacy: Database, legacy_client: TestClient) -> None:
    cli("collections", "rename", "team/a", "team-a")
    assert _names(legacy) == {"fine", "team-a", *LEGACY} - {"team/a"}
    assert "/c/team-a" in HREF.findall(legacy_client.get("/").text)
    assert legacy_client.get("/c/team-a").status_code == 200
    assert "team-a\t0\t0\t0" in cli("collections").splitlines()


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("team/a", "still/bad", "collection name 'still/bad' is not allowed"),
        ("team/a", "", "collection name '' is not allowed"),
        ("team/a", "fine", "a collection named 'fine' exists already"),
        ("no-such", "other", "no-such"),
    ],
)
def test_rename_refuses_a_bad_or_taken_name_and_changes_nothing(
    legacy: Database, old: str, new: str, message: str
) -> None:
    before = _names(legacy)
    assert message in cli("collections", "rename", old, new, expect=2)
    assert _names(legacy) == before


def test_renaming_to_the_same_name_is_a_no_op(legacy: Database) -> None:
    cli("collections", "rename", "fine", "fine")
    assert "fine" in _names(legacy)
