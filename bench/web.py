"""Benchmark: web latency (p50/p95) and size of every page and htmx fragment, on a sample-sized and a
DL-sized collection, and the rubric save round trip (save → the final `grades` event, warm cache),
against the same server's /healthz round trip as the in-run baseline.

A live uvicorn server in this process (embedded worker, SQLite) and an HTTP client. Two synthetic
collections: ``bench``, one query with 300 pooled passages, 10 questions, 20 systems, graded by the
default grader; ``dl``, the DL-sized collection of bench/evaluate.py (54 queries × 10 questions,
59 systems, top-100) with judgments, texts and a rubric version added (``build_dl``). Every page
is timed on both: leaderboard, compare, agreement, the four oversight views, grid, rubric, history,
jobs, job, collection (and their htmx fragments). Run it pinned to two cores, as documented:

    taskset -c 0,1 .venv/bin/python bench/web.py

``--scale N`` makes ``dl`` N × 54 queries (issue 16: 5× is 1.1M grades); ``--prebuilt DB`` starts it from a
SQLite database the synthetic collection was already imported into (as ``bench``, e.g. by bench/scale.py),
copied, never written. ``--database postgresql`` copies everything into a throwaway PostgreSQL cluster
(bench/postgres.py) and serves from there. ``--only TEXT`` times the matching pages; ``--no-write`` prints.

    taskset -c 0,1 .venv/bin/python bench/web.py --scale 5 --prebuilt /tmp/scale5/bench.sqlite --database postgresql

It writes its section of docs/benchmarks.md (one per scale and database) and asserts nothing about time
(the tests never do).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import socket
import sqlite3
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
from sqlalchemy import insert, select, update  # noqa: E402

from app.accounts.service import create_user  # noqa: E402
from app.collections.revision import next_revision, replace_judgments_token  # noqa: E402
from app.collections.service import ensure_collection, import_interchange, import_queries  # noqa: E402
from app.config import get_settings  # noqa: E402
from app.db import session_scope  # noqa: E402
from app.events import listen  # noqa: E402
from app.grading.service import GraderSpec  # noqa: E402
from app.jobs.launch import launch_grading, wait_until_finished  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from app.rubrics.service import import_banks  # noqa: E402
from bench.postgres import DURABILITY_NOTE  # noqa: E402
from bench.report import machine, stamp, write_section  # noqa: E402

N_PASSAGES, N_ITEMS, N_SYSTEMS, REPEATS = 300, 10, 20, 30
JOB_ID: int | None = None  # the grading job of ``bench`` (its page is timed)
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
    globals()["JOB_ID"] = job_id


def build_dl(directory: Path) -> None:
    """The DL-sized synthetic collection of bench/evaluate.py (54 queries × 10 items, 59 systems), as ``dl``.

    bench/evaluate.py leaves out what the oversight views read; added here so that their tables are
    as long as on DL19: a judgment (0..3) for every other pooled passage, a passage text of 60 words,
    answers, and a rubric version holding each query's 10 items.
    """
    from bench.evaluate import N_ITEMS as ITEMS
    from bench.evaluate import synthetic_collection

    data, _ = synthetic_collection(directory)
    rng = random.Random(13)
    lines, banks = [], []
    for line in data.read_text().splitlines():
        query_id, paragraphs = json.loads(line)
        for n, paragraph in enumerate(paragraphs):
            paragraph["text"] = " ".join(rng.choice(WORDS) for _ in range(60)) + "."
            if n % 2 == 0:
                judgment = {"paragraphId": paragraph["paragraph_id"], "query": query_id, "relevance": rng.randint(0, 3)}
                paragraph["paragraph_data"]["judgments"] = [judgment]
        lines.append(json.dumps([query_id, paragraphs]))
        items = [
            {"query_id": query_id, "question_id": f"{query_id}/item{i}", "question_text": f"What about {WORDS[i]}?"}
            for i in range(ITEMS)
        ]
        banks.append(
            json.dumps({"query_id": query_id, "test_collection": "dl", "query_text": query_id, "items": items})
        )
    data.write_text("\n".join(lines) + "\n")
    (directory / "dl-bank.jsonl").write_text("\n".join(banks) + "\n")
    with session_scope() as session:
        collection = ensure_collection(session, "dl")
        import_interchange(session, collection, data)
        import_banks(session, collection, [directory / "dl-bank.jsonl"])


def dl_banks(directory: Path, queries: list[str]) -> Path:
    """One bank per query with bench/evaluate.py's item ids, so that the rubric version holds the graded items."""
    from bench.evaluate import N_ITEMS as ITEMS

    banks = [
        {
            "query_id": query_id,
            "test_collection": "dl",
            "query_text": query_id,
            "items": [
                {"query_id": query_id, "question_id": f"{query_id}/item{i}", "question_text": f"What about {WORDS[i]}?"}
                for i in range(ITEMS)
            ],
        }
        for query_id in queries
    ]
    path = directory / "dl-bank.jsonl"
    path.write_text("\n".join(json.dumps(bank) for bank in banks) + "\n")
    return path


def adopt_prebuilt(prebuilt: Path, target: Path) -> None:
    """Copy a database that bench/evaluate.py's synthetic collection was imported into (as ``bench``) to
    ``target`` and rename that collection ``dl``: importing 5× anew takes minutes, this takes seconds."""
    shutil.copyfile(prebuilt, target)
    with sqlite3.connect(target) as connection:
        connection.execute("UPDATE collection SET name = 'dl' WHERE name = 'bench'")


def enrich_dl(directory: Path) -> None:
    """What build_dl adds on top of bench/evaluate.py's collection, written in bulk into an imported ``dl``:
    60-word texts, a judgment (0..3) for every other pool entry, and the rubric version of every query's items.
    The structure token is replaced, as for any structural write, so no cached snapshot survives it."""
    from app.models import Collection, Judgment, Passage, PoolEntry, Query

    rng = random.Random(13)
    with session_scope() as session:
        collection = session.execute(select(Collection).where(Collection.name == "dl")).scalar_one()
        passages = session.execute(select(Passage.id).where(Passage.collection_id == collection.id)).scalars()
        session.execute(
            update(Passage),
            [{"id": pk, "text": " ".join(rng.choice(WORDS) for _ in range(60)) + "."} for pk in passages],
        )
        entries = session.execute(
            select(PoolEntry.id).join(Query).where(Query.collection_id == collection.id).order_by(PoolEntry.id)
        ).scalars()
        session.execute(
            insert(Judgment),
            [{"pool_entry_pk": pk, "ordinal": 0, "relevance": rng.randint(0, 3)} for pk in list(entries)[::2]],
        )
        queries = session.execute(
            select(Query.query_id).where(Query.collection_id == collection.id).order_by(Query.position)
        ).scalars()
        import_banks(session, collection, [dl_banks(directory, list(queries))])
        next_revision(session, collection.id, structural=True)
        replace_judgments_token(session, collection.id)  # as every judgment write does


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


def timings(client: httpx.Client, path: str, headers: dict[str, str] | None = None) -> tuple[list[float], int]:
    """REPEATS request times (seconds) after one warm-up, and the response's size in bytes."""
    client.get(path, headers=headers)  # warm-up
    result, size = [], 0
    for _ in range(REPEATS):
        begin = time.perf_counter()
        response = client.get(path, headers=headers)
        result.append(time.perf_counter() - begin)
        assert response.status_code == 200, (path, response.text[:300])
        size = len(response.content)
    return result, size


def pages(name: str, query: str, job: int | None) -> list[tuple[str, str, dict[str, str] | None]]:
    """(label, path, headers) of every page and htmx fragment of collection ``name``."""
    htmx = {"HX-Request": "true"}
    result: list[tuple[str, str, dict[str, str] | None]] = [
        ("collection", f"/c/{name}", None),
        ("leaderboard page (Cover, 1,000-sample CIs)", f"/c/{name}/leaderboard", None),
        ("leaderboard fragment (htmx)", f"/c/{name}/leaderboard", htmx),
        ("leaderboard fragment, P@20", f"/c/{name}/leaderboard?measure=P@20", htmx),
        ("compare", f"/c/{name}/compare", None),
        ("agreement", f"/c/{name}/agreement", None),
        ("oversight: spurious questions (bad), page 1", f"/c/{name}/oversight/bad", None),
        ("oversight: uncovered passages, page 1", f"/c/{name}/oversight/uncovered", None),
        ("oversight: verify grading, page 1 of all queries", f"/c/{name}/oversight/verify", None),
        ("oversight: verify grading, one query, page 2", f"/c/{name}/oversight/verify?query={query}&page=2", None),
        ("oversight: question impact, all items of one query", f"/c/{name}/oversight/impact?query={query}", None),
        ("grid page", f"/c/{name}/grid/{query}", None),
        ("grid fragment (htmx)", f"/c/{name}/grid/{query}?page=2", htmx),
        ("grid page, compact, sorted by disagreement", f"/c/{name}/grid/{query}?compact=on&sort=disagree", None),
        ("review queue page (priority)", f"/c/{name}/review", None),
        ("review queue: next cell (htmx)", f"/c/{name}/review?offset=1", htmx),
        ("review queue page (uniform sample)", f"/c/{name}/review?mode=uniform", None),
        ("review statistics", f"/c/{name}/review/stats", None),
        ("leaderboard with significance groups", f"/c/{name}/leaderboard?significance=1", htmx),
        ("rubric page", f"/c/{name}/rubric/{query}", None),
        ("history", f"/c/{name}/history", None),
        ("jobs", f"/c/{name}/jobs", None),
    ]
    if job is not None:
        result += [("job page", f"/jobs/{job}", None), ("job progress fragment (htmx)", f"/jobs/{job}", htmx)]
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
    ended = False  # a job's last batch publishes its end (``jobs``), then the grades revision
    for event in stream:
        ended = ended or bool(event and event.get("type") == "jobs" and event.get("state") == "done")
        if ended and event and event.get("type") == "grades":
            got.set()
            return


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] * 1000


def copy_to_postgresql(source: str, target: str) -> None:
    """Every table of the SQLite database ``source`` into the migrated, empty PostgreSQL database ``target``
    with psycopg's COPY, primary keys kept and sequences advanced: the same data, minutes of importing saved."""
    from psycopg.types.json import Jsonb
    from sqlalchemy import JSON, create_engine, func, text

    from app.models import Base

    upgrade(target)
    reader, writer = create_engine(source), create_engine(target)
    with reader.connect() as read, writer.begin() as write:
        cursor = write.connection.driver_connection.cursor()  # type: ignore[union-attr]
        for table in Base.metadata.sorted_tables:
            names = [column.name for column in table.columns]
            json_at = [n for n, column in enumerate(table.columns) if isinstance(column.type, JSON)]
            rows = read.execution_options(yield_per=20_000).execute(select(table))
            columns = ", ".join(f'"{n}"' for n in names)
            with cursor.copy(f'COPY "{table.name}" ({columns}) FROM STDIN') as copy:
                for row in rows:
                    values = list(row)
                    for n in json_at:
                        values[n] = None if values[n] is None else Jsonb(values[n])
                    copy.write_row(values)
            if "id" in names and write.execute(select(func.count()).select_from(table)).scalar_one():
                write.execute(
                    text(
                        f"SELECT setval(pg_get_serial_sequence('\"{table.name}\"', 'id'), max(id)) FROM \"{table.name}\""
                    )
                )
    # As after any bulk load: without statistics the planner takes the million grades for a few
    # hundred until autovacuum's analyze comes round, and the grid then scanned every grade of the
    # grader (170 ms); whether that happened before or during the timing made the figures a lottery.
    with writer.begin() as write:
        write.execute(text("ANALYZE"))
    reader.dispose()
    writer.dispose()


def use_database(url: str) -> None:
    os.environ["RUBRIC_DATABASE_URL"] = url
    get_settings.cache_clear()


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=int, default=1, help="the dl collection at N × 54 queries (default 1)")
    parser.add_argument(
        "--prebuilt",
        type=Path,
        help="a SQLite database with bench/evaluate.py's collection at this scale imported as `bench` (copied, "
        "never written); without it the collection is generated and imported",
    )
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--only", help="time only the pages whose label contains this text")
    parser.add_argument("--no-write", action="store_true", help="print the table; leave docs/benchmarks.md as is")
    return parser.parse_args()


def main() -> None:
    args = arguments()
    with tempfile.TemporaryDirectory(prefix="rubric-bench-web-") as name:  # a 5× database is 300 MB: removed after
        directory = Path(name)
        if args.prebuilt:
            adopt_prebuilt(args.prebuilt, directory / "web.sqlite")
        build(directory)
        if args.prebuilt:
            enrich_dl(directory)
        else:
            import bench.evaluate

            bench.evaluate.N_QUERIES = 54 * args.scale
            build_dl(directory)
        if args.database == "sqlite":
            rows, saves = measure(args.only)
        else:
            from bench.postgres import create_database, local_postgres  # starts nothing until called

            with local_postgres() as url_base:
                target = create_database(url_base, "web")
                copy_to_postgresql(get_settings().database_url, target)
                use_database(target)
                rows, saves = measure(args.only)
    text = report(rows, saves, args.scale, args.database)
    print(text)
    if not args.no_write:
        scale = f", {args.scale}×" if args.scale != 1 else ""
        database = ", PostgreSQL" if args.database == "postgresql" else ""
        write_section(f"Web latency (`bench/web.py`{scale}{database})", text)


def measure(only: str | None) -> tuple[list[tuple[str, str, list[float], int]], list[float]]:
    base = serve()
    with httpx.Client(base_url=base, timeout=120) as client:
        token = re.search(r'name="csrf-token" content="([^"]+)"', client.get("/login").text).group(1)  # type: ignore[union-attr]
        client.post("/login", data={"name": "judge", "password": "bench-grader-pw", "csrf_token": token})
        token = re.search(r'name="csrf-token" content="([^"]+)"', client.get("/").text).group(1)  # type: ignore[union-attr]
        rows = [("baseline: /healthz round trip", "", *timings(client, "/healthz"))]
        rows.append(("collections (home)", "", *timings(client, "/")))
        for name, query, job in (("bench", "q1", JOB_ID), ("dl", "q0", None)):
            for label, path, headers in pages(name, query, job):
                if only and only not in label:
                    continue
                rows.append((label, name, *timings(client, path, headers)))
                print(
                    f"{name:6} {label:55} p95 {pct(rows[-1][2], 0.95):7.0f} ms {rows[-1][3] / 1000:8.0f} kB", flush=True
                )
        saves = save_round_trips(client, token)
    return rows, saves


def report(rows: list[tuple[str, str, list[float], int]], saves: list[float], scale: int, database: str) -> str:
    floor = statistics.median(rows[0][2])
    table = "\n".join(
        f"| {name or '—'} | {label} | {pct(v, 0.5):.0f} ms | {pct(v, 0.95):.0f} ms | "
        f"{statistics.median(v) / floor:.0f}× | {size / 1000:.0f} kB |"
        for label, name, v, size in rows
    )
    slow = [f"{name}: {label}" for label, name, v, _ in rows if pct(v, 0.95) >= 300]
    big = [f"{name}: {label}" for label, name, _, size in rows if size >= 1_000_000]
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    engine = "SQLite" if database == "sqlite" else DURABILITY_NOTE
    size = (
        "top-100: 21,589 pooled passages, 215,890 grades"
        if scale == 1
        else f"top-100, scaled {scale}×: about {21_589 * scale:,} pooled passages and {215_890 * scale:,} grades"
    )
    return f"""Measured {stamp()} on {machine()}, pinned to 2 cores (`taskset -c 0,1`), {engine}, embedded worker,
uvicorn in-process, {REPEATS} requests each after one warm-up; size = bytes of the response body. Load
average (1, 5, 15 min) when the run ended: {load} — other processes shared the cores, so the figures are
upper bounds.

`bench` is the sample-sized collection (1 query, 300 pooled passages × 10 questions, 20 systems);
`dl` the DL-sized synthetic collection of bench/evaluate.py ({54 * scale} queries × 10 questions, 59 systems,
{size}) with judgments for every other passage, 60-word
texts and a rubric version. Oversight and grid pages hold at most 50 rows. Each oversight view is
also `rubric verify COLLECTION ANALYSIS --page N --format json` (verify = grading, bad = bad-questions,
uncovered = uncovered, impact = impact), the same data as the page.

| collection | request | p50 | p95 | p50 vs baseline | size |
|---|---|---|---|---|---|
{table}

Over 300 ms at p95: {"; ".join(slow) or "none"}. Over 1 MB: {"; ".join(big) or "none"}.

Rubric save → the final `grades` event, on which the leaderboard re-fetches (`bench`, warm cache;
{len(saves)} saves): p50 {pct(saves, 0.5):.0f} ms, p95 {pct(saves, 0.95):.0f} ms.

Targets (issue 11): p95 under 300 ms for every page and fragment on 2 cores, question impact of one
query's items under 300 ms, no page over 1 MB; under 2 s from save to that event."""


if __name__ == "__main__":
    main()
