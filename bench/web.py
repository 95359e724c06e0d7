"""Benchmark: web latency (p50/p95) of the grid page (300 passages × 10 items), the leaderboard fragment,
and the rubric save round trip (save → final leaderboard event, warm cache), against the same server's
/healthz round trip as the in-run baseline.

A live uvicorn server in this process (embedded worker, SQLite) and an HTTP client; the collection is
synthetic: one query with 300 pooled passages, 10 questions, 20 systems, graded by the default grader.
A second collection, the DL-sized synthetic one of bench/evaluate.py, times the oversight views
(question impact of one query's items, the paged verify / spurious / uncovered tables).

Run: ``.venv/bin/python bench/web.py``; writes a section of docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
import uvicorn  # noqa: E402

from app.accounts.service import create_user  # noqa: E402
from app.collections.service import ensure_collection, import_interchange, import_queries  # noqa: E402
from app.config import get_settings  # noqa: E402
from app.db import session_scope  # noqa: E402
from app.events import listen  # noqa: E402
from app.grading.service import GraderSpec  # noqa: E402
from app.jobs.launch import launch_grading, wait_until_finished  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from app.rubrics.service import import_banks  # noqa: E402
from bench.report import machine, stamp, write_section  # noqa: E402

N_PASSAGES, N_ITEMS, N_SYSTEMS, REPEATS = 300, 10, 20, 40
WORDS = [
    "yeast",
    "gluten",
    "dough",
    "oven",
    "crust",
    "flour",
    "sugar",
    "gas",
    "bubble",
    "knead",
    "rise",
    "bake",
    "water",
    "salt",
    "starter",
    "loaf",
]


def build(directory: Path) -> None:
    rng = random.Random(11)
    os.environ["RUBRIC_DATABASE_URL"] = f"sqlite:///{directory / 'web.sqlite'}"
    os.environ.pop("RUBRIC_REDIS_URL", None)
    get_settings.cache_clear()
    upgrade(get_settings().database_url)
    systems = [f"run{s:02d}" for s in range(N_SYSTEMS)]
    paragraphs = []
    for p in range(N_PASSAGES):
        rankings = [
            {"method": s, "paragraphId": f"p{p}", "queryId": "q1", "rank": r, "score": 1.0 / r}
            for s in systems
            if (r := rng.randint(1, 400)) <= 100
        ]
        text = " ".join(rng.choice(WORDS) for _ in range(60)) + "."
        paragraphs.append(
            {
                "paragraph_id": f"p{p}",
                "text": text,
                "paragraph_data": {
                    "judgments": [{"paragraphId": f"p{p}", "query": "q1", "relevance": rng.randint(0, 3)}],
                    "rankings": rankings,
                },
            }
        )
    (directory / "passages.jsonl").write_text(json.dumps(["q1", paragraphs]) + "\n")
    (directory / "queries.json").write_text(json.dumps({"q1": "why does bread dough rise"}))
    items = [
        {"query_id": "q1", "question_id": f"q1/{i}", "question_text": f"What does {WORDS[i]} do to the dough?"}
        for i in range(N_ITEMS)
    ]
    (directory / "bank.jsonl").write_text(
        json.dumps(
            {"query_id": "q1", "test_collection": "bench", "query_text": "why does bread dough rise", "items": items}
        )
        + "\n"
    )
    with session_scope() as session:
        collection = ensure_collection(session, "bench")
        import_queries(session, collection, directory / "queries.json")
        import_interchange(session, collection, directory / "passages.jsonl")
        import_banks(session, collection, [directory / "bank.jsonl"])
        create_user(session, "judge", "judge", "bench-grader-pw")
        job = launch_grading(session, collection, GraderSpec())
        session.commit()
        job_id, collection_id = job.id, collection.id
    wait_until_finished(job_id)
    globals()["COLLECTION_ID"] = collection_id


def build_dl(directory: Path) -> None:
    """The DL-sized synthetic collection of bench/evaluate.py (54 queries × 10 items, 59 systems), as ``dl``."""
    from bench.evaluate import synthetic_collection

    data, _ = synthetic_collection(directory)
    with session_scope() as session:
        import_interchange(session, ensure_collection(session, "dl"), data)


def serve() -> str:
    from app.web.main import create_app

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}"


def timings(client: httpx.Client, path: str, headers: dict[str, str] | None = None) -> list[float]:
    client.get(path, headers=headers)  # warm-up
    result = []
    for _ in range(REPEATS):
        begin = time.perf_counter()
        response = client.get(path, headers=headers)
        result.append(time.perf_counter() - begin)
        assert response.status_code == 200, response.text[:300]
    return result


def save_round_trips(client: httpx.Client, token: str) -> list[float]:
    """Edit one question back and forth (both texts cached after the first two saves); time to the event."""
    texts = ["What does yeast do to the dough?", "What does yeast do to bread dough?"]
    result = []
    for n in range(12):
        old, new = texts[n % 2], texts[(n + 1) % 2]
        page = client.get("/c/bench/rubric/q1").text
        item_id = re.search(
            r'name="item_id" value="([^"]+)">\s*<input type="hidden" name="expected_text" value="' + re.escape(old),
            page,
        )
        assert item_id, "item not found"
        got = threading.Event()
        ready = threading.Event()
        threading.Thread(target=_watch, args=(ready, got), daemon=True).start()
        ready.wait(5)
        time.sleep(0.1)
        begin = time.perf_counter()
        response = client.post(
            "/c/bench/rubric/q1/save",
            data={"action": "edit", "item_id": item_id.group(1), "expected_text": old, "text": new},
            headers={"X-CSRF-Token": token, "HX-Request": "true"},
        )
        assert response.status_code == 200, response.text[:300]
        assert got.wait(30)
        if n >= 2:
            result.append(time.perf_counter() - begin)
    return result


def _watch(ready: threading.Event, got: threading.Event) -> None:
    stream = listen(globals()["COLLECTION_ID"], timeout=0.05)
    ready.set()
    for event in stream:
        if event and event.get("type") == "leaderboard" and event.get("final"):
            got.set()
            return


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] * 1000


def main() -> None:
    directory = Path(tempfile.mkdtemp())
    build(directory)
    build_dl(directory)
    base = serve()
    with httpx.Client(base_url=base, timeout=60) as client:
        token = re.search(r'name="csrf-token" content="([^"]+)"', client.get("/login").text).group(1)  # type: ignore[union-attr]
        client.post("/login", data={"name": "judge", "password": "bench-grader-pw", "csrf_token": token})
        token = re.search(r'name="csrf-token" content="([^"]+)"', client.get("/").text).group(1)  # type: ignore[union-attr]
        rows = [
            ("baseline: /healthz round trip", timings(client, "/healthz")),
            ("grid page, 300 passages × 10 items (full page)", timings(client, "/c/bench/grid/q1?page=1")),
            ("grid fragment (htmx)", timings(client, "/c/bench/grid/q1", {"HX-Request": "true"})),
            (
                "leaderboard fragment (htmx, Cover, 1,000-sample CIs)",
                timings(client, "/c/bench/leaderboard", {"HX-Request": "true"}),
            ),
            ("DL size: question impact, all 10 items of one query", timings(client, "/c/dl/oversight/impact?query=q0")),
            ("DL size: verify grading, page 1 of all queries", timings(client, "/c/dl/oversight/verify")),
            ("DL size: verify grading, one query", timings(client, "/c/dl/oversight/verify?query=q0")),
            ("DL size: spurious questions, page 1", timings(client, "/c/dl/oversight/bad")),
            ("DL size: uncovered passages, page 1", timings(client, "/c/dl/oversight/uncovered")),
        ]
        sizes = {view: len(client.get(f"/c/dl/oversight/{view}").content) for view in ("verify", "bad", "uncovered")}
        saves = save_round_trips(client, token)
    floor = statistics.median(rows[0][1])
    table = "\n".join(
        f"| {name} | {pct(v, 0.5):.0f} ms | {pct(v, 0.95):.0f} ms | {statistics.median(v) / floor:.0f}× |"
        for name, v in rows
    )
    body = f"""Measured {stamp()} on {machine()}, SQLite, embedded worker, uvicorn in-process, {REPEATS} requests each.
The grid page shows 50 passages per page of the 300 (server-side pagination) and all 10 item columns.

| request | p50 | p95 | p50 vs baseline |
|---|---|---|---|
{table}

DL size is the synthetic collection of bench/evaluate.py (54 queries, 59 systems, top-100, 10 questions
per query); oversight pages hold at most 50 rows; page 1 sizes: {", ".join(f"{v} {n / 1000:.0f} kB" for v, n in sizes.items())}.

Rubric save → final leaderboard event (warm cache; {len(saves)} saves): p50 {pct(saves, 0.5):.0f} ms, p95 {pct(saves, 0.95):.0f} ms.

Targets: p95 under 150 ms for pages; under 2 s from save to leaderboard event; question impact of one
query's items under 300 ms; no oversight page over 1 MB."""
    write_section("Web latency (`bench/web.py`)", body)


if __name__ == "__main__":
    main()
