"""The calibration against the judges' overrides: the same JSON from the CLI and agreement.json, on both databases."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.models import Collection, Grade
from app.review import overrides
from app.web.main import create_app
from tests.conftest import Database
from tests.helpers import cli
from tests.web.conftest import PASSWORDS, login
from tests.web.test_accessibility import _describe, _violations
from tests.web.test_browser import SHOTS, browser, server  # noqa: F401
from tests.web.test_screenshots import VIEWPORT

ARGS = {"min_answers": 1, "min_judgment": 2}


def _override_some_cells(database: Database) -> int:
    """Three overrides of the sample's first grader's cells, with E[grade] 4.6, 1.0 and 1.0 (score mode)."""
    with database.session() as session:
        collection = session.scalars(select(Collection).where(Collection.name == "sample")).one()
        grades = session.scalars(select(Grade).where(Grade.self_rating.is_not(None)).order_by(Grade.id)).all()
        grader = grades[0].grader_pk
        cells = [g for g in grades if g.grader_pk == grader][:3]
        cells[0].expected_grade, cells[0].probabilities = 4.6, {"3": 0.2, "4": 0.3, "5": 0.5}
        for low in cells[1:]:
            low.expected_grade, low.probabilities = 1.0, {"0": 0.5, "2": 0.5}
        for grade, rating in zip(cells, (5, 0, 3), strict=True):
            entry, item = grade.pool_entry_pk, grade.item_id
            overrides.record(session, collection, entry, item, action="set", judge="judge", rating=rating)
        session.commit()
        return grader


def test_cli_and_agreement_json_carry_the_same_calibration(web_db_any: Database) -> None:
    with TestClient(create_app()) as client:
        login(client, "viewer")
        before = client.get("/c/sample/agreement.json", params=ARGS).json()["calibration"]
        assert (before["n"], before["ece"], before["by_grade"]) == (0, None, [])
        assert "No overrides yet of cells this grader graded" in client.get("/c/sample/agreement", params=ARGS).text
        grader = _override_some_cells(web_db_any)
        web = client.get("/c/sample/agreement.json", params={**ARGS, "grader": grader}).json()
        page = client.get("/c/sample/agreement", params={**ARGS, "grader": grader}).text
    flags = ("--min-answers", "1", "--min-judgment", "2", "--grader", str(grader), "--format", "json")
    assert json.loads(cli("agreement", "sample", "--sweep", *flags)) == web
    only = json.loads(cli("agreement", "sample", "--calibration", *flags))
    assert only == web["calibration"] and only["n"] == 3
    bins = [(r["low"], r["n"], r["mean_expected"], r["mean_judge"], r["p_at_least"]) for r in only["by_bin"]]
    assert bins == [(0.5, 2, 1.0, 1.5, 0.0), (4.5, 1, 4.6, 5.0, pytest.approx(0.8))]
    assert only["ece"] == pytest.approx((2 / 3 * 0.5 + 1 / 3 * 0.4) / 5)
    assert only["binary_ece"] == pytest.approx(1 / 3 * 0.2)
    assert 'data-testid="calibration-by-grade"' in page and 'data-testid="calibration-by-bin"' in page
    table = cli("agreement", "sample", "--calibration", "--grader", str(grader), "--format", "tsv")
    assert "[4.5, 5]\t1\t4.600\t5.000\t0.800" in table and "n\tece\tbinary_ece_at_4\n3\t0.093\t0.067" in table


def test_calibration_section_in_chromium_passes_axe(server: str, browser: Any, web_db: Database) -> None:  # noqa: F811
    """The section with its two tables, photographed (agreement-calibration.png) and checked by axe-core."""
    grader = _override_some_cells(web_db)
    page = browser.new_context(viewport=VIEWPORT, bypass_csp=True).new_page()  # axe is injected
    page.goto(f"{server}/login")
    page.fill("input[name=name]", "viewer")
    page.fill("input[name=password]", PASSWORDS["viewer"])
    page.click("button[type=submit]")
    page.wait_for_url(f"{server}/")
    violations = _violations(page, f"{server}/c/sample/agreement?min_judgment=2&grader={grader}")
    section = page.locator("[data-testid=calibration]")
    section.scroll_into_view_if_needed()
    SHOTS.mkdir(parents=True, exist_ok=True)
    section.screenshot(path=str(SHOTS / "agreement-calibration.png"))
    assert section.locator("caption").all_inner_texts() == ["By predicted grade", "By E[grade] bin (score mode)"]
    assert "Expected calibration error: 0.093" in section.inner_text()
    assert not violations, _describe(violations)
