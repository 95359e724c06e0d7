"""The leaderboard page's reproducibility bundle: the download's manifest command reproduces the page's board."""

from __future__ import annotations

import html
import io
import json
import re
import tarfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.collections import bundle
from app.config import get_settings
from app.db import engine_for, session_scope
from app.models import GradeCache
from tests.conftest import _sqlite_copy, forget_process_caches
from tests.helpers import cli
from tests.web.conftest import login

PAGE = "/c/sample/leaderboard?measure=P@5&min_rating=3&overrides=1&exclude_flagged=1"


def test_download_reproduces_the_pages_board(
    client: TestClient, tmp_path: Path, sqlite_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    login(client, "viewer")
    page = client.get(PAGE).text
    link = re.search(r'<a href="([^"]+)"[^>]*>reproducibility bundle</a>', page)
    assert link, "the leaderboard page links its bundle"
    href = html.unescape(link.group(1))
    response = client.get(href)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/gzip"
    assert "sample.bundle.tar.gz" in response.headers["content-disposition"]
    with tarfile.open(fileobj=io.BytesIO(response.content), mode="r:gz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    manifest = json.loads(members["manifest.json"])
    assert manifest["leaderboard"]["settings"]["include_overrides"] is True
    assert manifest["rows"]["grade_cache"] > 0  # the cache entries the grades came from travel with them
    # the bundle's board is the page's JSON export of the same settings (the CLI prints a final newline)
    export = client.get(href.replace("/bundle.tar.gz", "/leaderboard.json")).content
    assert members["leaderboard.json"] == export + b"\n"

    (tmp_path / "target").mkdir()
    url = _sqlite_copy(tmp_path / "target", sqlite_template)  # tmp_path/rubric.sqlite is the web's database
    monkeypatch.setenv("RUBRIC_DATABASE_URL", url)
    get_settings.cache_clear()
    forget_process_caches()
    try:
        path = tmp_path / "sample.tar.gz"
        path.write_bytes(response.content)
        cached = [json.loads(line) for line in members["tables/grade_cache.jsonl"].splitlines()]
        with session_scope() as session:  # the cache is shared: an entry already here is kept, not duplicated
            session.add(GradeCache(key=cached[0]["key"], raw_answer="kept"))
        cli("import", "bundle", path)
        with session_scope() as session:
            assert session.get(GradeCache, cached[0]["key"]).raw_answer == "kept"  # type: ignore[union-attr]
            assert len(session.scalars(select(GradeCache.key)).all()) == len(cached)
        assert cli(*manifest["leaderboard"]["argv"][1:]).encode() == members["leaderboard.json"]
    finally:
        engine_for(url).dispose()
        get_settings.cache_clear()


def test_one_build_at_a_time_and_bounded_settings(client: TestClient) -> None:
    login(client, "viewer")
    assert client.get("/c/sample/bundle.tar.gz?top_k=abc").status_code == 400
    assert client.get("/c/sample/bundle.tar.gz?trials=5").status_code == 400
    assert client.get("/c/nowhere/bundle.tar.gz").status_code == 404
    with bundle.build_slot():  # another request is building one
        assert client.get("/c/sample/bundle.tar.gz").status_code == 429
