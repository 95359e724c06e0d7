"""The grid in a real browser: every filter from its default state, paging with filters, a judge's
override → clear → undo, flag and unflag, the [ and ] query keys, and a viewer without edit keys."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from app.models import GradeOverride, OverrideEvent
from app.web import grid_view
from tests.conftest import Database
from tests.web.test_browser import SHOTS, Session, browser, server  # noqa: F401

SWAP = "() => document.getElementById('grid') !== window.__grid"


def _change(page: object, selector: str, value: str | None = None) -> None:
    """Change one filter control and wait for htmx to swap the grid in."""
    page.evaluate("() => { window.__grid = document.getElementById('grid'); }")  # type: ignore[attr-defined]
    control = page.locator(selector)  # type: ignore[attr-defined]
    if value is None:
        control.check()
    else:
        control.select_option(value)
    page.wait_for_function(SWAP, timeout=10_000)  # type: ignore[attr-defined]


def test_every_filter_from_the_default_state_then_paging(
    server: str,  # noqa: F811
    browser: object,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(grid_view, "PAGE_SIZE", 2)  # the sample's pools are shorter than a real page
    viewer = Session(browser, server, "viewer")
    page = viewer.page
    changes = [
        ("select[name=system]", "__second__"),
        ("select[name=judged]", "judged"),
        ("select[name=min_grade]", "3"),
        ("input[name=disagree]", None),
        ("select[name=sort]", "passage"),
        ("select[name=compact]", "on"),
    ]
    for selector, value in changes:
        viewer.visit("/c/sample/grid/bees")
        if value == "__second__":
            value = page.locator(f"{selector} option").nth(1).get_attribute("value") or ""
            value = value or page.locator(f"{selector} option").nth(1).inner_text()
        _change(page, selector, value)
        assert page.locator("#grid [data-testid=pager]").count() == 1, selector
        assert page.locator("#toast:visible").count() == 0, selector
    viewer.visit("/c/sample/grid/bees")
    _change(page, "select[name=sort]", "passage")
    _change(page, "select[name=compact]", "on")
    _change(page, "select[name=min_grade]", "0")
    first = page.locator("#grid tbody tr").evaluate_all("rows => rows.map(r => r.dataset.passage)")
    page.evaluate("() => { window.__grid = document.getElementById('grid'); }")
    page.locator("[data-testid=next-page]").click()
    page.wait_for_function(SWAP, timeout=10_000)
    assert "page 2/" in page.locator("[data-testid=pager]").inner_text()
    assert page.locator("#grid.compact").count() == 1
    second = page.locator("#grid tbody tr").evaluate_all("rows => rows.map(r => r.dataset.passage)")
    assert first + second == sorted(first + second) and len(set(first + second)) == 4
    page.reload()  # the URL holds every setting: a reload (or a bookmark) shows the same page
    assert "page 2/" in page.locator("[data-testid=pager]").inner_text()
    assert page.locator("select[name=sort]").input_value() == "passage"
    assert page.locator("select[name=min_grade]").input_value() == "0"
    page.locator("[data-testid=previous-page]").click()
    page.wait_for_function("() => document.querySelector('[data-testid=pager]').innerText.includes('page 1/')")
    # errors show the server's message, never raw JSON or a whole page
    text = page.evaluate('() => window.rubricErrorText(\'{"detail": "a grade is 0 to 5"}\', 400)')
    assert text == "a grade is 0 to 5"
    error_page = '<html><nav><a href="/">overview</a></nav><p class="error" role="alert">no such cell</p></html>'
    assert page.evaluate("body => window.rubricErrorText(body, 404)", error_page) == "no such cell"
    assert viewer.errors == []
    viewer.close()


def test_judge_overrides_clears_undoes_flags_and_changes_query(
    server: str,  # noqa: F811
    browser: object,  # noqa: F811
    web_db: Database,
) -> None:
    judge = Session(browser, server, "judge")
    page = judge.page
    judge.visit("/c/sample/grid/bees?compact=off&sort=passage", shot="grid-judge-full")
    cell = page.locator("#grid td.cell").first
    cell.click()
    model = cell.get_attribute("data-model") or ""
    rating = "1" if model != "1" else "2"
    page.keyboard.press(rating)
    cell.locator(".human").wait_for(state="visible", timeout=10_000)
    assert cell.locator(".grade").inner_text() == rating
    assert cell.locator(".who").inner_text().startswith("judge · ")
    page.keyboard.press("c")
    cell.locator(".human").wait_for(state="hidden", timeout=10_000)
    assert cell.locator(".grade").inner_text() == (model or "·")
    page.keyboard.press("u")
    expect(page.locator("#toast")).to_contain_text("undone: Q1 of passage", timeout=10_000)
    cell.locator(".human").wait_for(state="visible", timeout=10_000)
    assert cell.locator(".grade").inner_text() == rating
    cell.locator("button.clear").click()  # the mouse's way to clear
    cell.locator(".human").wait_for(state="hidden", timeout=10_000)
    with web_db.session() as session:
        assert session.scalars(select(GradeOverride)).first() is None
        events = list(session.scalars(select(OverrideEvent).order_by(OverrideEvent.id)))
    assert [e.action for e in events] == ["set", "clear", "clear"] and events[1].undone
    assert all(e.grader_pk is not None and e.source == "grid" for e in events)
    cell.click()
    page.keyboard.press("x")
    expect(page.locator("#toast")).to_contain_text("Q1 flagged as spurious", timeout=10_000)
    judge.visit("/c/sample/grid/bees?compact=off")
    head = page.locator("#grid th.item-head").first
    assert "flagged by judge" in head.locator(".flag-mark").inner_text()
    head.locator("button.unflag").click()
    head.locator(".flag-mark").wait_for(state="hidden", timeout=10_000)
    judge.visit("/c/sample/grid/bees?compact=off")
    assert page.locator("#grid th.item-head.flagged").count() == 0
    # undo survives a reload and skips undone actions: the mouse's clear, then the first set, then nothing
    cell = page.locator("#grid td.cell").first
    cell.click()
    toast = page.locator("#toast")
    for key, text in (("u", f"is {rating}"), ("Control+z", "has no judge's grade"), ("u", "nothing to undo")):
        page.keyboard.press(key)
        expect(toast).to_contain_text(text, timeout=10_000)
    expect(cell.locator(".human")).to_be_hidden()
    position = page.locator("[data-testid=query-position]").inner_text()
    page.locator("#grid td.cell").first.click()
    page.keyboard.press("]")
    page.wait_for_url(lambda url: "/grid/bees" not in url, timeout=10_000)
    assert "compact=off" in page.url
    assert page.locator("[data-testid=query-position]").inner_text() != position
    page.keyboard.press("[")
    page.wait_for_url(lambda url: "/grid/bees" in url, timeout=10_000)
    assert judge.errors == ["Failed to load resource: the server responded with a status of 404 (Not Found)"]
    judge.close()


def test_viewer_has_no_edit_keys(server: str, browser: object, web_db: Database) -> None:  # noqa: F811
    viewer = Session(browser, server, "viewer")
    page = viewer.page
    viewer.visit("/c/sample/grid/bees?compact=off")
    assert "Read only" in page.locator("[data-testid=grid-hint]").inner_text()
    assert page.locator("#grid button.clear, #grid button.unflag").count() == 0
    page.locator("#grid td.cell").first.click()
    page.keyboard.press("5")
    expect(page.locator("#toast")).to_contain_text("read only", timeout=10_000)
    page.keyboard.press("?")
    assert "0–5" not in page.locator("dialog#help").inner_text()
    with web_db.session() as session:
        assert session.scalars(select(GradeOverride)).first() is None
    assert viewer.errors == []
    viewer.close()


assert SHOTS  # screenshots of the grid land beside the other pages'
