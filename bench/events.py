"""Benchmark: row re-fetches per job event on the jobs page, before and after per-job event names.

50 headless Chromium tabs (one browser context each, so each has its own connection pool) hold the
jobs page of a collection with 50 running jobs open, each with its SSE stream. Job progress events
are published as a worker publishes them (``app.events.publish`` from another thread, embedded
mode), and an ASGI wrapper counts the requests the tabs send back until they stop.

* before: the page as it was (every row re-fetched on the one ``job`` event name), events named ``job``;
* after: the page as it is (a row re-fetches on its own ``job-<id>`` only), events named per job;
  plus the one list re-fetch each tab makes on a ``jobs`` event (a job appearing or ending).

Run: ``.venv/bin/python bench/events.py``; writes a section of docs/benchmarks.md.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import uvicorn  # noqa: E402
from jinja2 import ChoiceLoader, DictLoader  # noqa: E402

from app.accounts.service import create_user  # noqa: E402
from app.collections.service import ensure_collection  # noqa: E402
from app.config import get_settings  # noqa: E402
from app.db import session_scope  # noqa: E402
from app.events import LOCAL, publish  # noqa: E402
from app.grading.service import GraderSpec  # noqa: E402
from app.jobs.events import job_event, jobs_event  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from app.models import Job  # noqa: E402
from app.web.deps import TEMPLATES  # noqa: E402
from bench.report import machine, stamp, write_section  # noqa: E402

TABS, JOBS, EVENTS = 50, 50, 3
CHROMIUM = "/usr/bin/chromium"
PASSWORD = "watches-the-rows-7"
Scope = MutableMapping[str, Any]
App = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]

# The row of the page before this change: every row listens to every job's progress.
ROW_NOW = re.compile(
    r"<td><div\{% if j\.state in [^%]*%\} (hx-get=\"[^\"]*\") hx-trigger=\"sse:job-\{\{ j\.id \}\}\" "
    r"hx-swap=\"innerHTML\"\{% endif %\}>"
)
ROW_BEFORE = r'<td><div \1 hx-trigger="sse:job" hx-swap="innerHTML">'
LIST_NOW = re.compile(r'<div [^>]*hx-trigger="sse:jobs"[^>]*></div>\n')  # the list did not follow new jobs


class Counting:
    """The app, counting the GET requests per kind of path that the open tabs send."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.requests: Counter[str] = Counter()
        self._lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            kind = "row" if re.fullmatch(r"/jobs/\d+", path) else "list" if path.endswith("/jobs") else "other"
            with self._lock:
                self.requests[kind] += 1
        await self.app(scope, receive, send)

    def settle(self, expect: bool = True, quiet: float = 3.0, limit: float = 300) -> Counter[str]:
        """The counts once no request arrived for ``quiet`` seconds (after the first, if one is ``expect``ed).

        50 browsers on a small machine may take seconds to react to an event: waiting for the first
        request keeps a slow start from reading as none.
        """
        deadline = time.monotonic() + limit
        last, since = self.snapshot(), time.monotonic()
        waiting = expect
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = self.snapshot()
            if now != last:
                last, since, waiting = now, time.monotonic(), False
            elif not waiting and time.monotonic() - since >= quiet:
                break
        return last

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.requests)


def build(directory: Path) -> tuple[int, list[Job]]:
    os.environ["RUBRIC_DATABASE_URL"] = f"sqlite:///{directory / 'events.sqlite'}"
    os.environ.pop("RUBRIC_REDIS_URL", None)
    os.environ["RUBRIC_MAX_STREAMS_PER_USER"] = str(TABS * 2)
    get_settings.cache_clear()
    upgrade(get_settings().database_url)
    with session_scope() as session:
        collection = ensure_collection(session, "events")
        jobs = [
            Job(
                collection_id=collection.id,
                kind="grade",
                launched_by="bench",
                params={"grader": GraderSpec().as_dict()},
                total=100,
                done=10,
                cached=0,
                errors=0,
                model_calls=10,
                state="running",
            )
            for _ in range(JOBS)
        ]
        session.add_all(jobs)
        create_user(session, "viewer", "viewer", PASSWORD)
        session.flush()
        for job in jobs:
            session.expunge(job)
        return collection.id, jobs


def serve(app: Counting) -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}"


def use_template(before: bool) -> None:
    """Serve jobs.html as it is, or with its rows as they were (one ``job`` event for every row)."""
    source = (REPO / "templates" / "jobs.html").read_text()
    if before:
        source, count = ROW_NOW.subn(ROW_BEFORE, source)
        source, lists = LIST_NOW.subn("", source)
        assert count == lists == 1, "templates/jobs.html changed: update ROW_NOW and LIST_NOW"
    loader = TEMPLATES.env.loader
    base = loader.loaders[-1] if isinstance(loader, ChoiceLoader) else loader
    assert base is not None
    TEMPLATES.env.loader = ChoiceLoader([DictLoader({"jobs.html": source}), base])
    TEMPLATES.env.cache.clear() if TEMPLATES.env.cache is not None else None


def open_tabs(browser: Any, base: str, collection_id: int) -> list[Any]:
    login = browser.new_context()
    page = login.new_page()
    page.goto(f"{base}/login")
    page.fill("input[name=name]", "viewer")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")
    state = login.storage_state()
    login.close()
    contexts = []
    for _ in range(TABS):
        context = browser.new_context(storage_state=state)
        context.new_page().goto(f"{base}/c/events/jobs")
        contexts.append(context)
    deadline = time.monotonic() + 60
    while LOCAL.subscriber_count(collection_id) < TABS and time.monotonic() < deadline:
        time.sleep(0.1)
    assert LOCAL.subscriber_count(collection_id) == TABS, "not every tab opened its stream"
    return contexts


def measure(
    browser: Any, base: str, app: Counting, collection_id: int, jobs: list[Job], before: bool
) -> dict[str, float]:
    use_template(before)
    contexts = open_tabs(browser, base, collection_id)
    app.settle(expect=False)
    start = app.snapshot()
    for n in range(EVENTS):
        event = job_event(jobs[n])
        if before:
            event.pop("event")  # as workers named it then: one name for every job
        threading.Thread(target=publish, args=(collection_id, event)).start()  # as a worker thread does
        print(f"{'before' if before else 'after'}: event {n + 1}: {app.settle()['row'] - start['row']} rows so far")
    after_progress = app.settle(expect=False, quiet=10.0)  # the slowest tabs' last requests
    result = {"rows": (after_progress["row"] - start["row"]) / EVENTS}
    if not before:
        publish(collection_id, jobs_event(jobs[0]))
        app.settle()
        result["lists"] = float(app.snapshot()["list"] - after_progress["list"])
    for context in contexts:
        context.close()
    deadline = time.monotonic() + 30
    while LOCAL.subscriber_count(collection_id) and time.monotonic() < deadline:
        time.sleep(0.1)
    return result


def cpu_model() -> str:
    """The CPU's model name as lscpu shows it (the 50 browsers share its cores with the server)."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "CPU model unknown"


def main() -> None:
    from playwright.sync_api import sync_playwright

    from app.web.main import create_app

    collection_id, jobs = build(Path(tempfile.mkdtemp()))
    app = Counting(create_app())
    base = serve(app)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        before = measure(browser, base, app, collection_id, jobs, before=True)
        after = measure(browser, base, app, collection_id, jobs, before=False)
        browser.close()
    body = f"""Measured {stamp()} on {machine()}, {cpu_model()}, SQLite, embedded mode
(in-process events).
{TABS} headless Chromium tabs hold the jobs page of a collection with {JOBS} running jobs open, each with its
SSE stream; {EVENTS} job progress events are published as a worker publishes them, and the server counts the
requests the tabs send back (`bench/events.py`).

| page | row re-fetches per job progress event | per tab |
|---|---|---|
| before: every row listens to the one `job` event | {before["rows"]:.0f} | {before["rows"] / TABS:.0f} |
| after: a row listens to its own `job-<id>` only | {after["rows"]:.0f} | {after["rows"] / TABS:.0f} |

A job appearing or ending (`jobs` event) costs one list re-fetch per tab: {after["lists"]:.0f} for {TABS} tabs.
Workers no longer compute a Cover leaderboard per second: they publish the collection's revision (`grades`),
and only open leaderboard pages re-fetch."""
    write_section("Live events: re-fetches per job event (`bench/events.py`)", body)


if __name__ == "__main__":
    main()
