"""Browser tests: Playwright drives Debian's headless Chromium (never a downloaded browser) against a live server.

Screenshots of the main pages land in test-artifacts/screenshots; every page is checked for console errors.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from sqlalchemy import select

from app.models import GradeOverride
from app.web.main import create_app
from tests.conftest import REPO, Database
from tests.web.conftest import PASSWORDS

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = REPO / "test-artifacts" / "screenshots"

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium package is not installed")


@pytest.fixture
def server(web_db: Database) -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"])
        yield chromium
        chromium.close()


class Session:
    """One signed-in browser context that records console errors."""

    def __init__(self, browser: object, base: str, role: str) -> None:
        self.context = browser.new_context()  # type: ignore[attr-defined]
        self.page = self.context.new_page()
        self.base = base
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(f"{base}/login")
        self.page.fill("input[name=name]", role)
        self.page.fill("input[name=password]", PASSWORDS[role])
        self.page.click("button[type=submit]")
        self.page.wait_for_url(f"{base}/")

    def visit(self, path: str, shot: str | None = None) -> None:
        self.page.goto(self.base + path)
        self.page.wait_for_load_state("networkidle") if "events" not in path else None
        if shot:
            SHOTS.mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(SHOTS / f"{shot}.png"), full_page=True)

    def close(self) -> None:
        self.context.close()


def _weak_score(page: object) -> str:
    return str(page.locator('tr[data-system="weak-ranker"] td.score').inner_text())  # type: ignore[attr-defined]


def test_judge_edits_a_question_and_watches_the_leaderboard_move(server: str, browser: object) -> None:
    judge = Session(browser, server, "judge")
    board = judge.context.new_page()
    board.goto(f"{server}/c/sample/leaderboard?measure=cover&min_rating=4")
    before = _weak_score(board)
    judge.visit("/c/sample/rubric/bees", shot="rubric")
    item = judge.page.locator("li.item", has_text="What is the waggle dance?")
    item.locator("input[name=text]").fill("Which stock market index closed higher on Friday?")
    item.locator("form.edit button").click()
    judge.page.wait_for_selector("[data-testid=regrade] [data-state=done]", timeout=60_000)
    assert judge.page.locator("li.item", has_text="Which stock market index closed higher").count() == 1
    # the open leaderboard tab refreshes itself from the SSE leaderboard event
    board.wait_for_function(
        "before => document.querySelector('tr[data-system=\"weak-ranker\"] td.score').innerText !== before",
        arg=before,
        timeout=30_000,
    )
    assert _weak_score(board) != before
    SHOTS.mkdir(parents=True, exist_ok=True)
    board.screenshot(path=str(SHOTS / "leaderboard.png"), full_page=True)
    assert judge.errors == []
    judge.close()


def test_keyboard_override_in_the_grid(server: str, browser: object, web_db: Database) -> None:
    judge = Session(browser, server, "judge")
    judge.visit("/c/sample/grid/bread", shot="grid")
    judge.page.locator("#grid td.cell").first.click()
    judge.page.keyboard.press("ArrowRight")
    judge.page.keyboard.press("j")
    judge.page.keyboard.press("5")
    focused = judge.page.locator("#grid td.cell:focus")
    focused.locator(".human").wait_for(timeout=10_000)
    assert focused.locator(".grade").inner_text() == "5"
    judge.page.keyboard.press("?")
    assert judge.page.locator("dialog#help[open]").count() == 1
    with web_db.session() as session:
        override = session.scalars(select(GradeOverride)).one()
    assert override.rating == 5 and override.judge == "judge"
    assert judge.errors == []
    judge.close()


def test_viewer_sees_no_editing_controls_and_is_refused(server: str, browser: object) -> None:
    viewer = Session(browser, server, "viewer")
    viewer.visit("/c/sample/rubric/bees", shot="rubric-viewer")
    assert viewer.page.locator("form.edit").count() == 0
    assert viewer.page.locator("text=Draft questions with the LLM").count() == 0
    status = viewer.page.evaluate(
        """async () => {
            const token = document.querySelector('meta[name="csrf-token"]').content;
            const body = new URLSearchParams({action: 'add', text: 'Sneaky?'});
            const headers = {'X-CSRF-Token': token};
            const r = await fetch('/c/sample/rubric/bees/save', {method: 'POST', body, headers});
            return r.status;
        }"""
    )
    assert status == 403
    viewer.errors = [e for e in viewer.errors if "403" not in e]  # the refusal we provoked logs itself
    viewer.visit("/c/sample/jobs")
    assert viewer.page.locator("text=Launch grading").count() == 0
    assert viewer.errors == []
    viewer.close()


@pytest.mark.parametrize(
    ("path", "shot"),
    [
        ("/", "collections"),
        ("/c/sample", "overview"),
        ("/c/sample/agreement", "agreement"),
        ("/c/sample/oversight/bad", "oversight-bad"),
        ("/c/sample/oversight/impact", "oversight-impact"),
        ("/c/sample/jobs", "jobs"),
        ("/c/sample/history", "history"),
    ],
)
def test_main_pages_render_without_console_errors(server: str, browser: object, path: str, shot: str) -> None:
    organizer = Session(browser, server, "organizer")
    organizer.visit(path, shot=shot)
    assert organizer.errors == []
    organizer.close()
