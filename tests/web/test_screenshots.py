"""Every page, photographed at the sample's size and at DL19's, for a person to look at.

The screenshots land in test-artifacts/screenshots as ``<page>-sample.png`` and ``<page>-dl19.png``
(kept by CI as artifacts). One live server (a uvicorn subprocess) serves ``build_showcase``'s
database, built once per test process: ``sample`` graded by the default grader, and ``dl``, the
DL19-sized synthetic collection of bench/web.py. Each page must answer 200, log no console error
and not be wider than the window (a table that needs more room scrolls inside its own box).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.db import make_engine
from tests.conftest import Database
from tests.helpers import showcase
from tests.web.conftest import PASSWORDS
from tests.web.live import live_server
from tests.web.test_browser import CHROMIUM, SHOTS

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium package is not installed")

VIEWPORT = {"width": 1280, "height": 800}
COLLECTION_PAGES = [  # (shot name, path under /c/{name}; {query} is a query of the collection)
    ("overview", ""),
    ("rubric", "/rubric/{query}"),
    ("grid", "/grid/{query}"),
    ("review", "/review"),
    ("leaderboard", "/leaderboard"),
    ("compare", "/compare"),
    ("agreement", "/agreement"),
    ("oversight-bad", "/oversight/bad"),
    ("oversight-uncovered", "/oversight/uncovered"),
    ("oversight-verify", "/oversight/verify"),
    ("oversight-impact", "/oversight/impact"),
    ("jobs", "/jobs"),
    ("history", "/history"),
]
SIZES = {"sample": ("sample", "bees"), "dl19": ("dl", "q0")}
SITE_PAGES = [("collections", "/"), ("users", "/users"), ("account", "/account"), ("job", "/jobs/1")]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[str]:
    """The live server's base URL, over the showcase database."""
    path = showcase(tmp_path_factory.mktemp("showcase"), sqlite_template)
    url = f"sqlite:///{path}"
    database = Database(url, make_engine(url), "sqlite")
    with live_server(database) as base:
        yield base
    database.engine.dispose()


@pytest.fixture(scope="module")
def organizer(site: str) -> Iterator[object]:
    """One Chromium page signed in as the organizer (who sees every control), for the whole module."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"])
        page = chromium.new_context(viewport=VIEWPORT).new_page()
        page.goto(f"{site}/login")
        page.fill("input[name=name]", "organizer")
        page.fill("input[name=password]", PASSWORDS["organizer"])
        page.click("button[type=submit]")
        page.wait_for_url(f"{site}/")
        yield page
        chromium.close()


def open_page(page: object, url: str) -> list[str]:
    """Go to ``url``, wait for htmx to settle; returns the console errors it logged."""
    errors: list[str] = []

    def on_console(message: object) -> None:
        if message.type == "error":  # type: ignore[attr-defined]
            errors.append(message.text)  # type: ignore[attr-defined]

    page.on("console", on_console)  # type: ignore[attr-defined]
    try:
        response = page.goto(url)  # type: ignore[attr-defined]
        assert response is not None and response.status == 200, f"{url}: HTTP {response and response.status}"
        page.wait_for_load_state("networkidle")  # type: ignore[attr-defined]
    finally:
        page.remove_listener("console", on_console)  # type: ignore[attr-defined]
    return errors


def _shoot(page: object, url: str, name: str) -> None:
    errors = open_page(page, url)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)  # type: ignore[attr-defined]
    assert errors == [], f"{url}: console errors {errors}"
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")  # type: ignore[attr-defined]
    assert overflow <= 0, f"{url} is {overflow} px wider than the window (see {name}.png)"


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize(("shot", "path"), COLLECTION_PAGES, ids=[s for s, _ in COLLECTION_PAGES])
def test_collection_page(site: str, organizer: object, shot: str, path: str, size: str) -> None:
    collection, query = SIZES[size]
    _shoot(organizer, f"{site}/c/{collection}{path.format(query=query)}", f"{shot}-{size}")


@pytest.mark.parametrize(("shot", "path"), SITE_PAGES, ids=[s for s, _ in SITE_PAGES])
def test_site_page(site: str, organizer: object, shot: str, path: str) -> None:
    _shoot(organizer, site + path, f"{shot}-sample")


def test_login_page(site: str, organizer: object) -> None:
    context = organizer.context.browser.new_context(viewport=VIEWPORT)  # type: ignore[attr-defined]
    try:
        _shoot(context.new_page(), f"{site}/login", "login-sample")
    finally:
        context.close()


def test_every_page_route_is_photographed() -> None:
    """A new page (a GET route named ``*_page``) gets a screenshot here too."""
    from fastapi.routing import APIRoute

    from app.web.main import create_app

    covered = {re.sub(r"\{query\}", "{query_id:any}", "/c/{name}" + p) for _, p in COLLECTION_PAGES}
    covered |= {"/", "/users", "/account", "/jobs/{job_id}", "/login"}
    covered = {p.replace("/oversight/bad", "/oversight/{view}") for p in covered}
    routes: list[APIRoute] = []
    for route in create_app().routes:
        nested = getattr(route, "original_router", None)
        routes += [r for r in (nested.routes if nested else [route]) if isinstance(r, APIRoute)]
    pages = {r.path for r in routes if "GET" in r.methods and r.name.endswith("_page")}
    assert pages <= covered, f"pages without a screenshot: {sorted(pages - covered)}"
