"""Browser: flag and unflag a spurious question on the oversight page (toast, row and focus update in place)."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update

from app.models import Passage
from tests.conftest import Database
from tests.web.test_browser import CHROMIUM, SHOTS, Session, browser, server  # noqa: F401

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium package is not installed")

SPURIOUS = "/c/sample/oversight/bad?min_rating=1&min_judgment=3"


def test_flag_then_unflag_a_spurious_question(server: str, browser: object) -> None:  # noqa: F811
    judge = Session(browser, server, "judge")
    judge.visit("/c/sample", shot="overview-sample")
    judge.visit(SPURIOUS)
    cell = judge.page.locator("td.flag-cell").first
    item = cell.get_attribute("data-flag-item")
    assert cell.locator("[data-flag-status]").inner_text() == "not flagged"
    cell.locator("form[data-flag-form=flag] button").click()
    judge.page.locator("#toast", has_text="Flagged: ").wait_for(timeout=10_000)
    assert cell.locator("[data-flag-status]").inner_text().startswith("⚑ flagged by you")
    assert cell.locator("form[data-flag-form=flag]").is_hidden()
    unflag = cell.locator("form[data-flag-form=unflag] button")
    assert unflag.is_visible() and unflag.evaluate("b => b === document.activeElement")  # keyboard users stay put
    SHOTS.mkdir(parents=True, exist_ok=True)
    judge.page.screenshot(path=str(SHOTS / "oversight-sample.png"), full_page=True)
    # the server's word: a reload says the same
    judge.visit(SPURIOUS)
    again = judge.page.locator(f'td.flag-cell[data-flag-item="{item}"]').first
    assert again.locator("[data-flag-status]").inner_text().startswith("⚑ flagged by you")
    again.locator("form[data-flag-form=unflag] button").press("Enter")
    judge.page.locator("#toast", has_text="Unflagged: ").wait_for(timeout=10_000)
    assert again.locator("[data-flag-status]").inner_text() == "not flagged"
    judge.visit("/c/sample/agreement", shot="agreement-sample")
    assert judge.errors == []
    judge.close()


HEADER_PARTS = "header.top .brand, header.top .collection-name, header.top .collection-nav a, header.top .who > *"


def _rows_of(page: object, selector: str) -> set[int]:
    """The distinct rows (rounded vertical centres) that the elements matching ``selector`` sit on."""
    centre = "els => els.map(e => { const r = e.getBoundingClientRect(); return r.top + r.height / 2; })"
    centres = page.eval_on_selector_all(selector, centre)  # type: ignore[attr-defined]
    return {round(c / 12) for c in centres}


def test_header_fits_one_line_and_long_passages_open_on_demand(server: str, browser: object, web_db: Database) -> None:  # noqa: F811
    with web_db.session() as session:
        passage = session.scalars(select(Passage.passage_id).order_by(Passage.id)).first()
        session.execute(update(Passage).where(Passage.passage_id == passage).values(text="long words here " * 60))
        session.commit()
    judge = Session(browser, server, "judge")
    page = judge.page
    page.set_viewport_size({"width": 1280, "height": 800})
    judge.visit("/c/sample/oversight/uncovered?min_rating=5&min_judgment=0")
    assert len(_rows_of(page, HEADER_PARTS)) == 1  # brand, collection, every nav link and sign out: one line
    cell = page.locator("td.clamp").first
    closed = cell.bounding_box()["height"]
    cell.locator("xpath=..").locator("input[data-expand-text]").check()
    assert cell.bounding_box()["height"] > 2 * closed  # ticked: the whole passage; 3 lines before
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "oversight-uncovered-open.png"), full_page=True)
    judge.visit("/c/sample/oversight/verify")
    for row in page.locator("td.flag-cell").all()[:10]:  # one button per row: flag, or unflag when flagged
        assert [b.inner_text() for b in row.locator("button").all() if b.is_visible()] == ["flag"]
    page.set_viewport_size({"width": 900, "height": 800})
    assert len(_rows_of(page, HEADER_PARTS)) > 1  # narrow: the header wraps onto rows ...
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0  # ... never sideways
    page.screenshot(path=str(SHOTS / "header-900.png"))
    assert judge.errors == []
    judge.close()
