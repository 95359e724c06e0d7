"""Security headers on every response, RFC 6266 downloads, and query ids with any character.

The hostile collection is the sample with its query ids renamed to ``2019/17``, ``a?b`` and
``x%20y`` (TREC CAR ids hold ``/`` and ``%20``). Every link, form and htmx URL on its pages is
followed: each resolves to the route and the query id it was built for.
"""

from __future__ import annotations

import html
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session
from starlette.routing import BaseRoute, Match

from app.accounts.service import create_user
from app.collections.service import get_collection
from app.config import get_settings
from app.grading.engine import CellScope
from app.grading.service import GraderSpec
from app.jobs.launch import launch_grading
from app.models import BankItem, Query
from app.samples import write_sample
from app.web.deps import db
from app.web.main import create_app
from app.web.security import SECURITY_HEADERS, AnyText, content_disposition
from tests.conftest import REPO, Database
from tests.helpers import cli
from tests.jobs.helpers import wait_job
from tests.web.conftest import PASSWORDS, login

NAME = "team.q-1"
RENAMED = {"bees": "2019/17", "bread": "a?b", "aurora": "x%20y"}
HOSTILE_IDS = tuple(RENAMED.values())
URL_ATTRIBUTE = re.compile(r'\b(href|src|action|hx-get|hx-post|sse-connect|data-[a-z-]+-url)="([^"]*)"')
CHROMIUM = Path("/usr/bin/chromium")
SHOTS = REPO / "test-artifacts" / "screenshots"


def _import_hostile(db: Database, tmp_path: Path) -> None:
    """The sample collection under NAME with hostile query ids, graded by the default grader."""
    files = write_sample(tmp_path / "hostile")
    for path in (files.queries, files.passages, files.bank):
        text = path.read_text(encoding="utf-8")
        for old, new in RENAMED.items():
            text = text.replace(f'"{old}"', f'"{new}"')
        path.write_text(text, encoding="utf-8")
    cli("import", NAME, "--queries", files.queries, "--passages", files.passages, "--bank", files.bank)
    with db.session() as session:
        job = launch_grading(session, get_collection(session, NAME), GraderSpec(), scope=CellScope())
        session.commit()
        job_id = job.id
    assert wait_job(db, job_id).state == "done"
    with db.session() as session:
        for role, password in PASSWORDS.items():
            create_user(session, role, role, password)
        session.commit()


@pytest.fixture
def hostile(database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Database:
    monkeypatch.delenv("RUBRIC_REDIS_URL", raising=False)
    get_settings.cache_clear()
    _import_hostile(database, tmp_path)
    return database


@contextmanager
def _serving() -> Iterator[str]:
    """The app under uvicorn on a free loopback port (Starlette's httpx.Client decodes paths twice)."""
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
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def hostile_client(hostile: Database) -> Iterator[httpx.Client]:
    with _serving() as base, httpx.Client(base_url=base, timeout=60) as client:
        yield client


# ---- headers ----------------------------------------------------------------------------------


def _assert_security_headers(response: object, what: str) -> None:
    headers = response.headers  # type: ignore[attr-defined]
    for name, value in SECURITY_HEADERS.items():
        assert headers.get(name) == value, f"{what}: {name} is {headers.get(name)!r}"


def test_every_kind_of_response_carries_the_security_headers(hostile_client: httpx.Client) -> None:
    client = hostile_client
    _assert_security_headers(client.get("/", follow_redirects=False), "redirect to sign-in")
    _assert_security_headers(client.get("/login"), "page")
    _assert_security_headers(client.get("/static/app.js"), "static file")
    _assert_security_headers(client.get("/healthz"), "JSON")
    login(client, "viewer")
    _assert_security_headers(client.get(f"/c/{NAME}/leaderboard", headers={"HX-Request": "true"}), "fragment")
    missing = client.get("/c/no-such-collection")
    assert missing.status_code == 404
    _assert_security_headers(missing, "404 page")
    invalid = client.get(f"/c/{NAME}/agreement?min_answers=many")
    assert invalid.status_code == 422
    _assert_security_headers(invalid, "422 page")
    _assert_security_headers(client.get(f"/c/{NAME}/qrels"), "download")
    csp = client.get("/login").headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "'unsafe-inline'" not in csp and "'unsafe-eval'" not in csp


SECRET = "db-password=hunter2 at /srv/secret.py"  # what an exception's text may hold


def _raise_bug() -> None:
    raise RuntimeError(SECRET)


def _raise_database_bug(session: Session = db) -> None:
    raise OperationalError("SELECT secret", {}, Exception(SECRET))  # not a lock: a bug, so a 500


def _failing_app() -> FastAPI:
    """The app plus two test-only routes that fail as bugs do (an exception nobody maps)."""
    app = create_app()
    app.add_api_route("/test-only/bug", _raise_bug, name="test_bug")
    app.add_api_route("/test-only/database-bug", _raise_database_bug, name="test_database_bug")
    return app


@pytest.mark.parametrize("path", ["/test-only/bug", "/test-only/database-bug"])
@pytest.mark.parametrize("htmx", [False, True], ids=["page", "fragment"])
def test_a_500_carries_the_security_headers_and_leaks_nothing(sqlite_db: Database, path: str, htmx: bool) -> None:
    with TestClient(_failing_app(), raise_server_exceptions=False) as client:
        response = client.get(path, headers={"HX-Request": "true"} if htmx else {})
    assert response.status_code == 500
    _assert_security_headers(response, f"500 {'fragment' if htmx else 'page'}")
    assert "internal error" in response.text
    for leak in ("hunter2", "secret", "Traceback", "RuntimeError", "OperationalError", "SELECT"):
        assert leak not in response.text


def test_a_500_still_reaches_the_server_which_logs_it(sqlite_db: Database) -> None:
    """After answering, Starlette re-raises to the server (uvicorn logs the traceback); here, to the test client."""
    with TestClient(_failing_app()) as client, pytest.raises(RuntimeError, match="hunter2"):
        client.get("/test-only/bug")


# ---- Content-Disposition ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ['a"b.qrels', 'x"; filename="evil.exe', "line\r\nSet-Cookie: a=b.qrels", "naïve résumé.qrels", "..\\..\\x", ""],
)
def test_content_disposition_has_a_safe_fallback_and_the_exact_name(name: str) -> None:
    header = content_disposition(name)
    assert header.isascii() and "\r" not in header and "\n" not in header
    match = re.fullmatch(r"attachment; filename=\"([A-Za-z0-9._-]+)\"; filename\*=UTF-8''([A-Za-z0-9%._~-]*)", header)
    assert match, header
    assert not match.group(1).startswith(".")
    assert unquote(match.group(2), encoding="utf-8", errors="strict") == name


def test_the_qrels_download_is_named_after_the_collection(hostile_client: httpx.Client) -> None:
    login(hostile_client, "viewer")
    response = hostile_client.get(f"/c/{NAME}/qrels")
    assert response.status_code == 200
    assert response.headers["content-disposition"] == (
        f"attachment; filename=\"{NAME}.qrels\"; filename*=UTF-8''{NAME}.qrels"
    )
    assert "2019/17 0 " in response.text


# ---- names ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["2019/17", "a?b", "x%20y", "..", ".", "", "~", "~..", "~~.", "a/../b", "#x", "new\nline", "[/x]", "é"]
)
def test_any_text_survives_the_path_and_never_forms_a_dot_segment(value: str) -> None:
    convertor = AnyText()
    segment = convertor.to_string(value)
    assert re.fullmatch(r"[A-Za-z0-9%._~-]+", segment), segment  # no / ? # and never empty
    assert segment.lower() not in (".", "..", "%2e", "%2e%2e", ".%2e", "%2e.")
    assert convertor.convert(unquote(segment)) == value


def test_a_collection_name_outside_the_safe_set_is_refused_by_the_web_import(
    hostile_client: httpx.Client, hostile: Database, tmp_path: Path
) -> None:
    token = login(hostile_client, "organizer")
    queries = tmp_path / "queries.json"
    queries.write_text('{"q1": "a query"}', encoding="utf-8")
    with queries.open("rb") as handle:
        response = hostile_client.post(
            "/collections/import",
            params={"csrf_token": token},
            data={"name": "team/a", "csrf_token": token},
            files={"queries": ("queries.json", handle)},
            headers={"X-CSRF-Token": token},
        )
    assert response.status_code == 400
    assert "collection name &#39;team/a&#39; is not allowed" in response.text
    with hostile.session() as session:
        assert session.scalar(select(Query).where(Query.query_id == "q1")) is None


def _links(page: str) -> list[tuple[str, str]]:
    """(attribute, URL) for every same-origin URL on the page."""
    found = []
    for attribute, raw in URL_ATTRIBUTE.findall(page):
        url = html.unescape(raw)
        if url.startswith("/") and not url.startswith("//"):
            found.append((attribute, url))
    return found


def _route(app: FastAPI, method: str, url: str) -> tuple[str, dict[str, object]]:
    """The route name and converted path parameters the app resolves ``url`` to (as a server would)."""
    scope = {"type": "http", "method": method, "path": unquote(urlsplit(url).path), "root_path": ""}
    routes: list[BaseRoute] = []
    for route in app.router.routes:  # routers included with include_router are wrapped
        nested = getattr(route, "original_router", None)
        routes += nested.routes if nested else [route]
    for route in routes:
        match, child = route.matches(scope)
        if match == Match.FULL:
            return str(getattr(route, "name", "")), dict(child.get("path_params", {}))
    raise AssertionError(f"{method} {url} matches no route")


POST_ATTRIBUTES = {"action", "hx-post", "data-override-url", "data-flag-url", "data-unflag-url", "data-undo-url"}
GET_FORM_ACTION = re.compile(r'<form[^>]*\bmethod="get"[^>]*\baction="([^"]*)"', re.I)


def test_hostile_query_ids_render_and_every_link_resolves(hostile_client: httpx.Client, hostile: Database) -> None:
    """Crawl the collection's pages as an organizer: every GET link answers 200, every URL routes back."""
    client, app = hostile_client, create_app()
    login(client, "organizer")
    start = [f"/c/{NAME}", f"/c/{NAME}/oversight/bad", f"/c/{NAME}/oversight/uncovered", f"/c/{NAME}/oversight/verify"]
    queue, seen, pages_by_query = list(start), set(start), {q: set() for q in HOSTILE_IDS}
    while queue:
        url = queue.pop(0)
        response = client.get(url)
        assert response.status_code == 200, f"GET {url}: {response.status_code} {response.text[:300]}"
        if "text/html" not in response.headers.get("content-type", ""):
            continue
        get_actions = {html.unescape(a) for a in GET_FORM_ACTION.findall(response.text)}
        for attribute, link in _links(response.text):
            posted = attribute in POST_ATTRIBUTES and not (attribute == "action" and link in get_actions)
            method = "POST" if posted else "GET"
            name, params = _route(app, method, link)
            if "query_id" in params:
                assert params["query_id"] in HOSTILE_IDS, f"{link} lost its query id: {params}"
                pages_by_query[str(params["query_id"])].add(name)
            if method == "GET" and name not in ("events", "static") and link not in seen and len(seen) < 80:
                seen.add(link)
                queue.append(link)
    for query_id, names in pages_by_query.items():
        assert {"rubric_page", "grid_page", "save_rubric"} <= names, f"{query_id}: only {names}"


@pytest.mark.parametrize("query_id", HOSTILE_IDS)
def test_an_edit_saved_from_the_page_lands_on_its_query(
    hostile_client: httpx.Client, hostile: Database, query_id: str
) -> None:
    client = hostile_client
    token = login(client, "judge")
    overview = client.get(f"/c/{NAME}").text
    wanted = ("rubric_page", {"name": NAME, "query_id": query_id})
    rubric_url = next(u for a, u in _links(overview) if a == "href" and _route(create_app(), "GET", u) == wanted)
    page = client.get(rubric_url)
    assert page.status_code == 200 and f"Rubric for query {html.escape(query_id)}" in page.text
    save = next(u for a, u in _links(page.text) if a == "hx-post" and u.endswith("/save"))
    response = client.post(
        save,
        data={"action": "add", "text": f"New for {query_id}?"},
        headers={"X-CSRF-Token": token, "HX-Request": "true"},
    )
    assert response.status_code == 200, response.text[:300]
    with hostile.session() as session:
        owner = session.scalar(
            select(Query.query_id)
            .join(BankItem, BankItem.query_pk == Query.id)
            .where(BankItem.text == f"New for {query_id}?")
        )
    assert owner == query_id


def test_a_dot_query_id_is_addressed_with_its_escape(hostile_client: httpx.Client) -> None:
    login(hostile_client, "viewer")
    for raw, meant in (("~..", ".."), ("~", ""), ("%7E.", ".")):
        response = hostile_client.get(f"/c/{NAME}/rubric/{raw}")
        assert response.status_code == 404 and f"has no query {meant!r}" in html.unescape(response.text)


# ---- in a browser: no CSP violation, error text stays text -------------------------------------

browser_only = pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium package is not installed")
CSP_PROBE = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));
"""


@pytest.fixture
def live_server(sqlite_db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.delenv("RUBRIC_REDIS_URL", raising=False)
    get_settings.cache_clear()
    _import_hostile(sqlite_db, tmp_path)
    with _serving() as base:
        yield base


@browser_only
def test_pages_load_without_csp_violations_and_errors_show_as_text(live_server: str) -> None:
    from playwright.sync_api import sync_playwright

    base = live_server
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"])
        context = browser.new_context()
        context.add_init_script(CSP_PROBE)
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{base}/login")
        page.fill("input[name=name]", "judge")
        page.fill("input[name=password]", PASSWORDS["judge"])
        page.click("button[type=submit]")
        page.wait_for_url(f"{base}/")
        SHOTS.mkdir(parents=True, exist_ok=True)
        # Reached by clicking the app's own links, so the hostile ids travel as the pages encode them.
        page.goto(f"{base}/c/{NAME}")
        for query_id in HOSTILE_IDS:
            page.goto(f"{base}/c/{NAME}")
            row = page.locator("tr", has=page.locator(f"td:text-is('{query_id}')"))
            row.locator("a", has_text="rubric").click()
            page.wait_for_selector("h1:has-text('Rubric for query')")
            assert page.locator("h1").inner_text() == f"Rubric for query {query_id}"
            page.locator("a", has_text="grid for this query").click()
            page.wait_for_selector("#grid td.cell")
            assert page.locator("h1").inner_text() == f"Grid for query {query_id}"
        page.screenshot(path=str(SHOTS / "grid-hostile-id.png"), full_page=True)
        for path in (
            "/",
            f"/c/{NAME}",
            f"/c/{NAME}/leaderboard",
            f"/c/{NAME}/agreement",
            f"/c/{NAME}/oversight/bad",
            f"/c/{NAME}/jobs",
            f"/c/{NAME}/history",
            f"/c/{NAME}/compare",
            "/login",
        ):
            page.goto(base + path)
            page.wait_for_load_state("load")
            assert page.evaluate("window.__csp") == [], f"CSP violation on {path}"
            shot = path.strip("/").replace("/", "-").replace(".", "_") or "collections"
            page.screenshot(path=str(SHOTS / f"csp-{shot}.png"), full_page=True)
        page.goto(f"{base}/c/{NAME}/agreement")
        heat = page.evaluate("getComputedStyle(document.querySelector('td.heat')).getPropertyValue('--h')")
        assert heat.strip() != "", "the heat map lost its colour"
        # A hostile error body becomes text: no element of it is created, no handler runs.
        text = page.evaluate("window.rubricErrorText('<img src=x onerror=\"window.__pwned=1\"><b>boom</b>', 400)")
        assert text == "boom"
        page.goto(f"{base}/c/{NAME}/leaderboard")
        page.evaluate(
            "htmx.ajax('GET', document.querySelector('form.filters').getAttribute('hx-get') + "
            "'?grader=' + encodeURIComponent('<b>x</b>'), {target: '#board', swap: 'outerHTML'})"
        )
        page.wait_for_selector("#toast:not([hidden])")
        assert "'<b>x</b>'" in page.locator("#toast").inner_text()  # the grader value, as text
        assert page.locator("#toast b").count() == 0
        assert page.evaluate("window.__pwned === undefined")
        assert page.evaluate("window.__csp") == []
        unexpected = [e for e in errors if "400" not in e]  # the refusal we provoked logs itself
        assert unexpected == []
        context.close()
        browser.close()
