"""Browser: flag and unflag a spurious question on the oversight page (toast, row and focus update in place)."""

from __future__ import annotations

import pytest

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
