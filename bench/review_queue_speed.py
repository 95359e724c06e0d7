"""Benchmark: the review queue's ``next_cells`` (priority and uniform) and the uniform review page at DL size.

bench/web.py's ``build_dl`` collection (54 queries × 10 items, 59 systems) in a temporary SQLite
database; in-process (``next_cells`` in a session, the page through a TestClient), warm: the first
call builds the grader's snapshot and scores, which every later call reuses. Prints p50/p95 over
REPEATS calls; asserts nothing about time. Run pinned to two cores, as the docs quote it:

    taskset -c 0,1 .venv/bin/python bench/review_queue_speed.py
"""

from __future__ import annotations

import os
import platform
import re
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.accounts.service import create_user  # noqa: E402
from app.config import get_settings  # noqa: E402
from app.db import session_scope  # noqa: E402
from app.migrate import upgrade  # noqa: E402

REPEATS = 30


def p50_p95(values: list[float]) -> str:
    ordered = sorted(values)
    return f"p50 {statistics.median(ordered):.0f} ms / p95 {ordered[int(0.95 * (len(ordered) - 1))]:.0f} ms"


def timed(call: object) -> list[float]:
    assert callable(call)
    call()  # warm: the snapshot and the scores
    spent = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        call()
        spent.append((time.perf_counter() - started) * 1000)
    return spent


def main() -> None:
    directory = Path(tempfile.mkdtemp())
    os.environ["RUBRIC_DATABASE_URL"] = f"sqlite:///{directory / 'queue.sqlite'}"
    os.environ.pop("RUBRIC_REDIS_URL", None)
    get_settings.cache_clear()
    upgrade(get_settings().database_url)
    from bench.web import build_dl

    build_dl(directory)
    with session_scope() as session:
        create_user(session, "reviewer", "judge", "bench-queue-pw")
    from fastapi.testclient import TestClient
    from sqlalchemy import select

    from app.models import Collection
    from app.review.queue import QueueRequest, next_cells
    from app.web.main import create_app

    with session_scope() as session:
        collection = session.scalars(select(Collection).where(Collection.name == "dl")).one()
        cells = next_cells(session, collection, QueueRequest(judge="reviewer")).total
        rows = {}
        for mode in ("priority", "uniform"):
            request = QueueRequest(judge="reviewer", mode=mode)  # type: ignore[arg-type]
            rows[f"next_cells ({mode})"] = timed(lambda r=request: next_cells(session, collection, r))
    with TestClient(create_app()) as client:
        token = re.search(r'name="csrf-token" content="([^"]+)"', client.get("/login").text)
        assert token
        client.post("/login", data={"name": "reviewer", "password": "bench-queue-pw", "csrf_token": token.group(1)})
        for label, path, headers in (
            ("review page (uniform)", "/c/dl/review?mode=uniform", {}),
            ("cell fragment (uniform, htmx)", "/c/dl/review?mode=uniform&offset=1", {"HX-Request": "true"}),
            ("healthz (baseline)", "/healthz", {}),
        ):
            rows[label] = timed(lambda p=path, h=headers: client.get(p, headers=h).raise_for_status())
    print(f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs), {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(f"dl: {cells:,} cells, {REPEATS} warm calls each")
    for label, values in rows.items():
        print(f"- {label}: {p50_p95(values)}")


if __name__ == "__main__":
    main()
