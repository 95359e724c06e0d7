"""Ten cells through the review queue by keyboard only, in Chromium; then the stored overrides are checked."""

from __future__ import annotations

from sqlalchemy import select

from app.models import GradeOverride, OverrideEvent
from tests.conftest import Database
from tests.web.test_browser import SHOTS, Session, browser, server  # noqa: F401


def _shown(page: object) -> tuple[int, str, int | None]:
    section = page.locator("#review-cell")  # type: ignore[attr-defined]
    rating = section.get_attribute("data-model-rating")
    return (
        int(section.get_attribute("data-pool-entry")),
        section.get_attribute("data-item"),
        int(rating) if rating else None,
    )


def _press(page: object, key: str) -> None:
    """Press ``key`` and wait for the next cell (or the same cell with new progress) to be swapped in."""
    before = page.evaluate("document.getElementById('review-cell').outerHTML")  # type: ignore[attr-defined]
    page.keyboard.press(key)  # type: ignore[attr-defined]
    page.wait_for_function(  # type: ignore[attr-defined]
        "before => document.getElementById('review-cell').outerHTML !== before", arg=before, timeout=15_000
    )


def test_ten_cells_by_keyboard(server: str, browser: object, web_db: Database) -> None:  # noqa: F811
    judge = Session(browser, server, "judge")
    judge.visit("/c/sample/review", shot="review-sample")
    page = judge.page
    expected: dict[tuple[int, str], int] = {}
    seen = []
    # (key, what it leaves on the cell shown): accept, digits, skip, one undo that brings the cell back
    for key in ["a", "3", "n", "a", "5", "u", "0", "Enter", "2", "n", "1", "a"]:
        entry, item, model = _shown(page)
        if (entry, item) not in seen:
            seen.append((entry, item))
        if key in ("a", "Enter") and model is None:
            key = "4"  # nothing to accept on a cell without a grade
        if key in ("a", "Enter"):
            expected[(entry, item)] = model  # type: ignore[assignment]
        elif key.isdigit():
            expected[(entry, item)] = int(key)
        elif key == "u":
            previous = seen[-2]
            expected.pop(previous)
        _press(page, key)
        if key == "u":
            assert _shown(page)[:2] == previous  # the undone cell is shown again
    assert len(seen) == 10, seen
    assert "8 of 72 cells reviewed" in page.locator("[data-testid=review-progress]").inner_text()
    page.keyboard.press("?")
    assert page.locator("#review-help").is_visible()
    assert judge.errors == []
    judge.close()
    with web_db.session() as session:
        stored = {(o.pool_entry_pk, o.item_id): o.rating for o in session.scalars(select(GradeOverride))}
        events = session.scalars(select(OverrideEvent).order_by(OverrideEvent.id)).all()
    assert stored == expected
    assert len(events) == 9 and [e.undone for e in events].count(True) == 1
    assert {e.source for e in events} == {"queue"} and {e.judge for e in events} == {"judge"}
    assert SHOTS.joinpath("review-sample.png").exists()
