"""The rubric page in a real browser: keys [ and ] walk the queries (never while typing); flag and unflag redraw
only the item's flag area (unsaved text in other items stays)."""

from __future__ import annotations

from sqlalchemy import select

from app.models import Query
from tests.conftest import Database
from tests.web.test_browser import SHOTS, Session, browser, server  # noqa: F401


def test_brackets_walk_the_queries_and_flags_redraw_the_items(server: str, browser: object, web_db: Database) -> None:  # noqa: F811
    with web_db.session() as session:
        ids = list(session.scalars(select(Query.query_id).order_by(Query.position, Query.id)))
    judge = Session(browser, server, "judge")
    page = judge.page
    judge.visit(f"/c/sample/rubric/{ids[0]}")
    assert page.locator("[data-testid=query-position]").inner_text() == f"query 1 of {len(ids)}"
    # typed into a field, a bracket is text, not navigation
    field = page.locator("li.item input[name=text]").first
    field.click()
    field.press("End")
    field.type("]")
    assert page.url.endswith(f"/rubric/{ids[0]}") and field.input_value().endswith("]")
    page.locator("h1").click()
    page.keyboard.press("]")
    page.wait_for_url(f"**/rubric/{ids[1]}")
    assert page.locator("[data-testid=query-position]").inner_text() == f"query 2 of {len(ids)}"
    page.keyboard.press("[")
    page.wait_for_url(f"**/rubric/{ids[0]}")

    first = page.locator("li.item").first
    typed = page.locator("li.item").nth(1).locator("input[name=text]")
    typed.fill("unsaved words in item 2")  # a flag redraws item 1's flag area only: this text stays
    first.locator("summary").click()
    first.locator("input[name=reason]").fill("off-topic")
    first.locator("[data-testid=flag-button]").click()
    page.locator("li.item [data-testid=flag]").first.wait_for(timeout=10_000)
    assert "flagged by judge" in page.locator("li.item").first.locator("[data-testid=flag]").inner_text()
    assert typed.input_value() == "unsaved words in item 2"
    assert "flagged" in (first.get_attribute("class") or "")
    assert first.locator("[data-testid=unflag]").evaluate("b => b === document.activeElement")
    page.locator("li.item [data-testid=unflag]").first.click()
    page.locator("li.item [data-testid=flag]").first.wait_for(state="detached", timeout=10_000)
    assert typed.input_value() == "unsaved words in item 2"
    first.locator("summary").click()
    first.locator("input[name=reason]").fill("duplicate")
    first.locator("[data-testid=flag-button]").click()  # flagged again: the screenshot shows a flag
    page.locator("li.item [data-testid=flag]").first.wait_for(timeout=10_000)  # the redraw is done

    second = page.locator("li.item").nth(1)
    second.locator("input[name=text]").fill("Which way does the waggle run point?")
    second.locator("form.edit button").click()
    page.locator("[data-testid=saved]").wait_for(timeout=30_000)
    assert "edited q2 of" in page.locator("[data-testid=saved]").inner_text()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "rubric-sample.png"), full_page=True)
    page.locator("[data-testid=saved-diff]").click()
    page.locator("[data-testid=diff-edited]").wait_for()
    page.screenshot(path=str(SHOTS / "history-sample.png"), full_page=True)
    page.locator("[data-testid=revert-1]").click()
    page.locator("[data-testid=revert-summary]").wait_for()
    page.screenshot(path=str(SHOTS / "history-revert.png"), full_page=True)
    assert judge.errors == []
    judge.close()
