"""In Chromium: launch from an estimate and see the row end live; manage users. Screenshots of both pages."""

from __future__ import annotations

from tests.web.test_browser import SHOTS, Session, browser, server  # noqa: F401


def test_an_organizer_launches_from_the_estimate_and_the_row_ends_done(server: str, browser: object) -> None:  # noqa: F811
    organizer = Session(browser, server, "organizer")
    page = organizer.page
    organizer.visit("/c/sample/jobs")
    page.select_option("select[name=prompt_class]", "DirectSimilarity")
    page.select_option("select[name=query_id]", "bees")
    page.click("button:text-is('Estimate')")
    page.wait_for_selector("[data-testid=estimate]")
    assert "measured speed" in page.inner_text("[data-testid=estimate]")
    page.click("[data-testid=estimate] button:text-is('Launch')")
    page.wait_for_url("**/jobs#job-*")
    job = page.url.rsplit("#job-", 1)[1]
    page.wait_for_selector(f"tr#job-{job}[data-state=done]", timeout=60_000)
    row = page.locator(f"tr#job-{job}")
    assert "✓ done" in row.inner_text() and row.locator("button").count() == 0
    page.select_option("select[name=prompt_class]", "Similarity")
    page.click("button:text-is('Estimate')")
    page.wait_for_selector("[data-testid=nothing-to-grade]")
    assert page.locator("[data-testid=estimate] button:text-is('Launch')").is_disabled()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "jobs-sample.png"), full_page=True)
    assert organizer.errors == []
    organizer.close()


def test_an_organizer_disables_a_user_from_the_users_page(server: str, browser: object) -> None:  # noqa: F811
    organizer = Session(browser, server, "organizer")
    page = organizer.page
    organizer.visit("/users")
    page.click("button[aria-label='disable viewer']")
    page.wait_for_selector("text=viewer: disabled; their sessions ended")
    assert "✕ disabled since" in page.locator("tr[data-user=viewer]").inner_text()
    page.click("button:text-is('Set role') >> nth=0")  # the first row's role, unchanged: still fine
    page.wait_for_selector("p.notice")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "users-sample.png"), full_page=True)
    assert organizer.errors == []
    organizer.close()
