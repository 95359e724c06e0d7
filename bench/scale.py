"""Benchmark: the workbench at TREC RAG scale (issue 16) — 1×, 5× and 10× DL19 on SQLite and PostgreSQL.

Scale 1× is bench/evaluate.py's synthetic DL-sized collection (54 queries, 59 systems, top-100,
10 items per query); k× has 54·k queries. For each scale and database it measures, each command in
a FRESH process of the real CLI (``rubric …`` with ``RUBRIC_DATABASE_URL`` and an empty snapshot
cache directory of its own):

* ``rubric import`` of the passages file and the official ranking: seconds, cells/s, peak RSS;
* CLI start: ``python -c pass``, ``rubric --help`` and ``rubric collections`` (opens the database);
* cold ``rubric leaderboard bench --measure P@20`` and ``--measure cover``, with the snapshot cache
  empty (every row read from the database) and with the persisted snapshot of the previous run
  present; their peak RSS;

and in one process (``--probe``): the snapshot's resident bytes per cell (RSS after building the
structure and loading the grader's store, minus RSS before, both after ``gc`` and ``malloc_trim``),
the load time from the database and then from the persisted file, and the warm recompute after a
grading batch of 32 cells (bench/evaluate.py's ``Scenario``).

Peak RSS is each command's own (a launcher process in between: Linux carries the parent's peak into
a child). PostgreSQL runs on a throwaway cluster (bench/postgres.py) with fsync off; its server's
memory is not in the figures.

Run: ``.venv/bin/python bench/scale.py`` (1× and 5× on both databases, ~15 min on 2 cores);
``--ten`` adds 10×; ``--scales 0.2 --databases sqlite --no-write`` for a quick check. Generated
files are cached under ``--workdir``. Writes its table to docs/benchmarks.md unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.report import machine, stamp, write_section  # noqa: E402

TITLE = "TREC RAG scale (`bench/scale.py`)"
BASE_QUERIES = 54
MEASURES = ("P@20", "cover")
DATABASES = ("sqlite", "postgresql")
# The "done when" (at 10×, on both databases).
TARGET_COLD_S = 2.0  # cold leaderboard ≤ 2 s plus CLI start
TARGET_WARM_S = 0.3  # warm recompute after a grading batch < 300 ms
TARGET_BYTES_PER_CELL = 100
TARGET_CELLS_PER_S = 25_000
TARGET_START_S = 0.5  # CLI start for commands that need no model and no analysis


# ---- running commands ------------------------------------------------------------------------


@dataclass
class Sample:
    seconds: float
    peak_rss_mb: float


def _rubric() -> str:
    # The console script of the interpreter running this file (the project's venv), else PATH's.
    beside = Path(sys.executable).parent / "rubric"
    return str(beside) if beside.exists() else shutil.which("rubric") or "rubric"


# Linux carries a process's peak RSS across fork and exec (getrusage(2)), so a command started
# straight from this process would report at least this process's own peak (hundreds of MB once a
# collection is generated). A small launcher in between starts the command and reports the
# command's own peak and wall time (its own start is not timed).
_LAUNCHER = """
import os, subprocess, sys, time
start = time.perf_counter()
process = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(process.pid, 0)
seconds = time.perf_counter() - start
with open(sys.argv[1], "w") as out:
    out.write(f"{seconds} {usage.ru_maxrss} {os.waitstatus_to_exitcode(status)}")
"""


def run_timed(argv: list[str], env: dict[str, str], cwd: Path) -> Sample:
    """Run ``argv`` to completion in a fresh process; its wall time and its own peak RSS."""
    with tempfile.TemporaryFile() as stderr, tempfile.NamedTemporaryFile("r", suffix=".usage") as usage:
        launcher = [sys.executable, "-c", _LAUNCHER, usage.name, *argv]
        subprocess.run(launcher, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=stderr, check=False)
        seconds, max_rss_kib, returncode = usage.read().split() or ("0", "0", "-1")
        if int(returncode) != 0:
            stderr.seek(0)
            tail = stderr.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"{' '.join(argv)} exited {returncode}:\n{tail}")
    return Sample(float(seconds), int(max_rss_kib) / 1024)  # ru_maxrss is in KiB on Linux


def median_sample(samples: list[Sample]) -> Sample:
    return Sample(statistics.median(s.seconds for s in samples), max(s.peak_rss_mb for s in samples))


def snapshot_setting() -> str | None:
    """The environment variable of the snapshot cache directory setting, if app/config.py has one."""
    from app.config import Settings

    names = [n for n in Settings.model_fields if "snapshot" in n and ("dir" in n or "path" in n)]
    return f"RUBRIC_{names[0].upper()}" if names else None


class Environment:
    """The environment of one database's commands; each ``fresh_cache()`` is a new, empty snapshot directory."""

    def __init__(self, url: str, scratch: Path) -> None:
        self.url = url
        self.scratch = scratch
        self.setting = snapshot_setting()
        self.caches = 0

    def fresh_cache(self) -> Path:
        self.caches += 1
        path = self.scratch / f"cache{self.caches}"
        path.mkdir(parents=True)
        return path

    def env(self, cache: Path) -> dict[str, str]:
        env = dict(os.environ, RUBRIC_DATABASE_URL=self.url, XDG_CACHE_HOME=str(cache))
        if self.setting:
            env[self.setting] = str(cache / "snapshots")
        return env


def cache_bytes(cache: Path) -> int:
    return sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())


# ---- the collection --------------------------------------------------------------------------


def collection_files(workdir: Path, n_queries: int) -> tuple[Path, Path, float | None]:
    """The synthetic files for ``n_queries`` queries, generated once per workdir (seconds, or None when cached)."""
    import bench.evaluate as evaluate

    directory = workdir / f"q{n_queries}"
    data, official = directory / "synthetic.jsonl", directory / "official.json"
    if data.is_file() and official.is_file():
        return data, official, None
    building = Path(tempfile.mkdtemp(prefix=f"q{n_queries}-", dir=workdir))
    evaluate.N_QUERIES = n_queries
    start = time.perf_counter()
    evaluate.synthetic_collection(building)
    seconds = time.perf_counter() - start
    shutil.rmtree(directory, ignore_errors=True)
    building.rename(directory)  # a half-written generation is never taken for a cached one
    return data, official, seconds


def table_sizes(url: str) -> dict[str, int]:
    from sqlalchemy import func, select

    from app.db import make_engine, session_scope
    from app.models import Grade, PoolEntry, RankingEntry

    engine = make_engine(url)
    try:
        with session_scope(engine) as session:
            return {
                m.__tablename__: int(session.scalar(select(func.count()).select_from(m)) or 0)
                for m in (PoolEntry, RankingEntry, Grade)
            }
    finally:
        engine.dispose()


# ---- one scale on one database ---------------------------------------------------------------


@dataclass
class Result:
    database: str
    n_queries: int
    measured_at: str
    sizes: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # per step, for the run log
    import_: Sample | None = None
    start_python: Sample | None = None
    start_help: Sample | None = None
    start_db: Sample | None = None
    cold: dict[str, Sample] = field(default_factory=dict)
    persisted: dict[str, Sample] = field(default_factory=dict)
    persisted_bytes: int = 0
    cache_setting: str | None = None  # the snapshot cache directory's variable, when app/config.py has one
    probe: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def cells(self) -> int:
        return self.sizes.get("grade", 0)


def measure_one(
    database: str, url: str, n_queries: int, files: tuple[Path, Path], scratch: Path, repeats: int
) -> Result:
    env = Environment(url, scratch)
    result = Result(database, n_queries, stamp(), cache_setting=env.setting)
    try:
        _measure_steps(result, env, files, scratch, repeats)
    except RuntimeError as error:  # a failing command: keep what was measured, report it, go on
        result.error = str(error)
        print(f"  {database} q{n_queries} FAILED: {error}", flush=True)
    return result


def _measure_steps(result: Result, env: Environment, files: tuple[Path, Path], scratch: Path, repeats: int) -> None:
    data, official = files
    rubric = _rubric()
    url = env.url

    def step(name: str) -> contextlib.AbstractContextManager[None]:
        return _step(result, name)

    with step("upgrade"):
        run_timed([rubric, "db", "upgrade"], env.env(env.fresh_cache()), scratch)
    with step("import"):
        argv = [rubric, "import", "bench", "--passages", str(data), "--official", str(official)]
        result.import_ = run_timed(argv, env.env(env.fresh_cache()), scratch)
    result.sizes = table_sizes(url)
    with step("start"):
        start_env = env.env(env.fresh_cache())
        result.start_python = median_sample(
            [run_timed([sys.executable, "-c", "pass"], start_env, scratch) for _ in range(5)]
        )
        result.start_help = median_sample([run_timed([rubric, "--help"], start_env, scratch) for _ in range(5)])
        result.start_db = median_sample([run_timed([rubric, "collections"], start_env, scratch) for _ in range(5)])
    for measure in MEASURES:
        argv = [rubric, "leaderboard", "bench", "--measure", measure]
        with step(f"cold {measure}"):
            caches = [env.fresh_cache() for _ in range(repeats)]
            result.cold[measure] = median_sample([run_timed(argv, env.env(c), scratch) for c in caches])
        with step(f"persisted {measure}"):
            populated = caches[-1]  # the last cold run wrote its snapshot here (when persisting exists)
            result.persisted_bytes = cache_bytes(populated)
            samples = [run_timed(argv, env.env(populated), scratch) for _ in range(repeats)]
            result.persisted[measure] = median_sample(samples)
    with step("probe"):
        argv = [sys.executable, str(Path(__file__).resolve()), "--probe", url]
        output = subprocess.run(argv, env=env.env(env.fresh_cache()), cwd=scratch, capture_output=True, text=True)
        if output.returncode != 0:
            result.probe = {"error": output.stderr.strip().splitlines()[-1] if output.stderr.strip() else "failed"}
        else:
            result.probe = json.loads(output.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def _step(result: Result, name: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    result.seconds[name] = time.perf_counter() - start
    print(f"  {result.database} q{result.n_queries} {name}: {result.seconds[name]:.1f} s", flush=True)


# ---- the in-process probe: snapshot bytes per cell and warm recompute --------------------------


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _settled_rss() -> int:
    """RSS once garbage is collected and freed heap pages are handed back (else freed memory still counts)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return _rss_bytes()


def _load_snapshot(engine: Any) -> tuple[Any, float]:
    """Build (or bring up to date) the collection's snapshot and its grader's store; the seconds it took."""
    from app.collections import snapshot
    from app.collections.service import get_collection
    from app.db import session_scope

    start = time.perf_counter()
    with session_scope(engine) as session:
        snap = snapshot.current(session, get_collection(session, "bench"))
        grader = snap.grader_list()[0]
        frame = snap.grades(session, grader.id)
    seconds = time.perf_counter() - start
    del frame  # a per-request copy, not part of what the process keeps
    return snap, seconds


def probe(url: str, repeats: int = 5) -> dict[str, Any]:
    from sqlalchemy import func, select

    from app.collections import snapshot
    from app.db import make_engine, session_scope
    from app.models import Grade
    from bench.evaluate import Scenario, timed

    engine = make_engine(url)
    with session_scope(engine) as session:  # connect before the baseline: the pool's connection is not the snapshot
        cells = int(session.scalar(select(func.count()).select_from(Grade)) or 0)
    before = _settled_rss()
    snap, load_seconds = _load_snapshot(engine)
    after = _settled_rss()
    nbytes = getattr(snap, "nbytes", None)
    del snap
    snapshot.clear()  # the next load finds the file the first one wrote (when snapshot files are on)
    _, file_seconds = _load_snapshot(engine)
    scenario = Scenario(engine)
    scenario.recompute()  # the leaderboard's own first-use costs are not the batch's
    warm = {
        measure: timed(partial(scenario.recompute, measure), before=scenario.grade_batch_lands, repeats=repeats)
        for measure in MEASURES
    }
    engine.dispose()
    return {
        "cells": cells,
        "snapshot_rss_bytes": after - before,
        "bytes_per_cell": (after - before) / cells if cells else None,
        "snapshot_nbytes": nbytes() if callable(nbytes) else nbytes,
        "load_seconds": load_seconds,
        "file_seconds": file_seconds,
        "warm_seconds": warm,
    }


# ---- the report ------------------------------------------------------------------------------


def _label(n_queries: int) -> str:
    scale = n_queries / BASE_QUERIES
    return f"{scale:g}×" if scale == round(scale, 2) else f"{n_queries}q"


def _s(sample: Sample | None) -> str:
    return f"{sample.seconds:.2f} s" if sample else "–"


def _rows(results: list[Result]) -> list[tuple[str, list[str], list[float | None]]]:
    """(row label, cell per result, number per result for the growth factors)."""

    def values(fn: Any) -> list[float | None]:
        out = []
        for r in results:
            try:
                out.append(fn(r))
            except (KeyError, TypeError, AttributeError):
                out.append(None)
        return out

    rows: list[tuple[str, Any, str]] = [
        ("cells (grades)", lambda r: r.sizes["grade"], "{:,.0f}"),
        ("ranking rows", lambda r: r.sizes["ranking_entry"], "{:,.0f}"),
        ("`rubric import` seconds", lambda r: r.import_.seconds, "{:.1f} s"),
        ("`rubric import` cells/s", lambda r: r.cells / r.import_.seconds, "{:,.0f}"),
        ("`rubric import` peak RSS", lambda r: r.import_.peak_rss_mb, "{:,.0f} MB"),
        ("`python -c pass` (the interpreter alone)", lambda r: r.start_python.seconds, "{:.3f} s"),
        ("CLI start: `rubric --help`", lambda r: r.start_help.seconds, "{:.2f} s"),
        ("… ratio to `python -c pass`", lambda r: r.start_help.seconds / r.start_python.seconds, "{:.1f}×"),
        ("CLI start: `rubric collections` (opens the database)", lambda r: r.start_db.seconds, "{:.2f} s"),
    ]
    for measure in MEASURES:
        rows += [
            (
                f"cold `rubric leaderboard --measure {measure}`, cache empty",
                lambda r, m=measure: r.cold[m].seconds,
                "{:.2f} s",
            ),
            ("… peak RSS", lambda r, m=measure: r.cold[m].peak_rss_mb, "{:,.0f} MB"),
            (
                f"cold `… --measure {measure}`, persisted snapshot",
                lambda r, m=measure: r.persisted[m].seconds,
                "{:.2f} s",
            ),
            ("… peak RSS", lambda r, m=measure: r.persisted[m].peak_rss_mb, "{:,.0f} MB"),
        ]
    rows += [
        (
            "persisted snapshot on disk",
            lambda r: r.persisted_bytes / 2**20 if r.persisted_bytes else None,
            "{:,.1f} MB",
        ),
        (
            "in-process snapshot load from the database (structure + grader's store)",
            lambda r: r.probe["load_seconds"],
            "{:.2f} s",
        ),
        ("in-process snapshot load from the persisted file", lambda r: r.probe["file_seconds"], "{:.2f} s"),
        ("snapshot resident memory", lambda r: r.probe["snapshot_rss_bytes"] / 2**20, "{:,.0f} MB"),
        ("**snapshot bytes per cell** (RSS delta / cells)", lambda r: r.probe["bytes_per_cell"], "{:,.0f}"),
        ("… by the snapshot's own `nbytes()` / cells", lambda r: r.probe["snapshot_nbytes"] / r.cells, "{:,.0f}"),
    ]
    for measure in MEASURES:
        rows.append(
            (
                f"warm {measure} recompute after a grading batch of 32 cells",
                lambda r, m=measure: r.probe["warm_seconds"][m] * 1000,
                "{:,.0f} ms",
            )
        )
    table = []
    for label, fn, fmt in rows:
        numbers = values(fn)
        table.append((label, [fmt.format(v) if v is not None else "–" for v in numbers], numbers))
    return table


def _growth(numbers: list[float | None]) -> list[str]:
    """Each larger scale's value over the smallest scale's (the columns are sorted by scale)."""
    base = numbers[0]
    return [f"{value / base:.1f}" if base and value is not None else "–" for value in numbers[1:]]


def render(results: list[Result], loads: tuple[str, str], repeats: int, pg_note: str | None) -> str:
    by_db: dict[str, list[Result]] = {}
    for r in results:
        by_db.setdefault(r.database, []).append(r)
    parts = [
        f"Measured {stamp()} on {machine()}; load average {loads[0]} at the start, {loads[1]} at the end.",
        "Synthetic collection of bench/evaluate.py (59 systems, top-100, 10 items per query, every pooled passage "
        "graded); k× has 54·k queries. Every command runs in a fresh process of the real CLI with an empty snapshot "
        "cache directory of its own, except the persisted-snapshot runs, which reuse the last cold run's directory. "
        f"Times are medians (leaderboards: of {repeats} runs; start: of 5); peak RSS is the "
        "process's own (wait4), the maximum over the runs. Bytes per cell: RSS after building the snapshot and "
        "loading the grader's store minus RSS before, after gc and malloc_trim, in one process; warm recompute: "
        "bench/evaluate.py's Scenario, median of 5, in that process.",
    ]
    settings = {r.cache_setting for r in results}
    if settings == {None}:
        parts.append(
            "No snapshot cache directory setting in app/config.py: nothing is persisted, so the "
            "persisted-snapshot runs repeat the cold path."
        )
    else:
        parts.append(
            f"Snapshot cache directory: {', '.join(sorted(s or '–' for s in settings))} (a fresh one per run)."
        )
    if pg_note:
        parts.append(pg_note + "; the server's own memory is not in the peak RSS figures.")
    for database, rs in by_db.items():
        rs.sort(key=lambda r: r.n_queries)
        scales = [r.n_queries for r in rs]
        growth_heads = [f"{_label(n)}/{_label(scales[0])}" for n in scales[1:]]
        heads = [f"{_label(r.n_queries)}" for r in rs] + growth_heads
        lines = [f"### {'SQLite' if database == 'sqlite' else 'PostgreSQL'}", ""]
        lines.append("| measure | " + " | ".join(heads) + " |")
        lines.append("|---|" + "---|" * len(heads))
        for label, cells, numbers in _rows(rs):
            lines.append(f"| {label} | " + " | ".join(cells + _growth(numbers)) + " |")
        errors = [f"{_label(r.n_queries)}: {r.probe['error']}" for r in rs if "error" in r.probe]
        errors += [f"{_label(r.n_queries)}: {_first_and_last(r.error)}" for r in rs if r.error]
        if errors:
            lines.append("\nFailed: " + "; ".join(errors))
        parts.append("\n".join(lines))
    parts.append(_targets(results))
    return "\n\n".join(parts)


def _first_and_last(error: str) -> str:
    lines = error.strip().splitlines()
    return lines[0] if len(lines) < 2 else f"{lines[0]} … {lines[-1]}"


def _targets(results: list[Result]) -> str:
    """The issue's "done when", judged on the largest scale measured per database."""
    lines = [
        "### Targets (issue 16, at 10×; judged here on the largest scale measured)",
        "",
        "| target | " + " | ".join(f"{r.database} {_label(r.n_queries)}" for r in _largest(results)) + " |",
        "|---|" + "---|" * len(_largest(results)),
    ]

    def verdict(value: float | None, ok: bool, fmt: str) -> str:
        return "–" if value is None else f"{fmt.format(value)} {'met' if ok else '**not met**'}"

    checks: list[tuple[str, Any]] = [
        (
            f"cold leaderboard (persisted, P@20) ≤ {TARGET_COLD_S:g} s + CLI start (`rubric --help`)",
            lambda r: (
                r.persisted["P@20"].seconds,
                r.persisted["P@20"].seconds <= TARGET_COLD_S + r.start_help.seconds,
                "{:.2f} s",
            ),
        ),
        (
            f"warm recompute after a grading batch < {TARGET_WARM_S * 1000:.0f} ms (P@20, cover)",
            lambda r: (
                max(r.probe["warm_seconds"].values()) * 1000,
                max(r.probe["warm_seconds"].values()) < TARGET_WARM_S,
                "{:.0f} ms",
            ),
        ),
        (
            f"snapshot RSS ≤ {TARGET_BYTES_PER_CELL} bytes per cell",
            lambda r: (r.probe["bytes_per_cell"], r.probe["bytes_per_cell"] <= TARGET_BYTES_PER_CELL, "{:.0f} B"),
        ),
        (
            f"import ≥ {TARGET_CELLS_PER_S:,} cells/s",
            lambda r: (r.cells / r.import_.seconds, r.cells / r.import_.seconds >= TARGET_CELLS_PER_S, "{:,.0f}/s"),
        ),
        (
            f"CLI start < {TARGET_START_S} s (`rubric --help`)",
            lambda r: (r.start_help.seconds, r.start_help.seconds < TARGET_START_S, "{:.2f} s"),
        ),
        (
            f"CLI start < {TARGET_START_S} s (`rubric collections`, opens the database)",
            lambda r: (r.start_db.seconds, r.start_db.seconds < TARGET_START_S, "{:.2f} s"),
        ),
    ]
    for label, check in checks:
        cells = []
        for r in _largest(results):
            try:
                value, ok, fmt = check(r)
                cells.append(verdict(value, ok, fmt))
            except (KeyError, TypeError, AttributeError):
                cells.append("–")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append(
        "| web pages p95 < 300 ms at 5× | not measured here: bench/web.py |" + " |" * (len(_largest(results)) - 1)
    )
    return "\n".join(lines)


def _largest(results: list[Result]) -> list[Result]:
    largest: dict[str, Result] = {}
    for r in results:
        if r.database not in largest or r.n_queries > largest[r.database].n_queries:
            largest[r.database] = r
    return list(largest.values())


# ---- main ------------------------------------------------------------------------------------


def _queries(scales: str, queries: int | None) -> list[int]:
    if queries is not None:
        return [queries]
    try:
        return [max(1, round(BASE_QUERIES * float(s))) for s in scales.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"error: --scales takes numbers like 1,5,10, not {scales!r}") from None


def _databases(spec: str) -> list[str]:
    chosen = [d.strip() for d in spec.split(",") if d.strip()]
    unknown = set(chosen) - set(DATABASES)
    if unknown:
        raise SystemExit(f"error: unknown database(s) {sorted(unknown)}; choose from {', '.join(DATABASES)}")
    if "postgresql" in chosen:
        from bench.postgres import postgres_bin

        if postgres_bin() is None:
            raise SystemExit("error: no PostgreSQL server under /usr/lib/postgresql/*/bin; use --databases sqlite")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--scales", default="1,5", help="comma-separated multiples of DL19's 54 queries (e.g. 0.2,1,5)")
    parser.add_argument("--ten", action="store_true", help="add 10× (540 queries, 2.2M cells)")
    parser.add_argument("--queries", type=int, help="one collection of exactly this many queries (overrides --scales)")
    parser.add_argument("--databases", default="sqlite,postgresql", help="sqlite, postgresql or both")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "rubric-bench-scale",
        help="generated collections are cached here; results.json of the last run is written here",
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs per cold leaderboard (median; default 3)")
    parser.add_argument("--no-write", action="store_true", help="print the section, leave docs/benchmarks.md alone")
    parser.add_argument("--probe", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.probe:
        print(json.dumps(probe(args.probe)))
        return
    n_queries = sorted(set(_queries(args.scales, args.queries) + ([BASE_QUERIES * 10] if args.ten else [])))
    databases = _databases(args.databases)
    args.workdir.mkdir(parents=True, exist_ok=True)
    loads = [f"{os.getloadavg()[0]:.2f}"]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        scratch = Path(tmp)
        files = {}
        for n in n_queries:
            data, official, seconds = collection_files(args.workdir, n)
            files[n] = (data, official)
            print(f"q{n}: " + (f"generated in {seconds:.1f} s" if seconds is not None else "cached"), flush=True)
        results: list[Result] = []
        pg_note = None
        with contextlib.ExitStack() as stack:
            for database in databases:
                pg_base = None
                if database == "postgresql":
                    from bench.postgres import DURABILITY_NOTE, create_database, local_postgres

                    pg_base = stack.enter_context(local_postgres())
                    pg_note = DURABILITY_NOTE
                    print(pg_note, flush=True)
                for n in n_queries:
                    work = scratch / f"{database}-q{n}"
                    work.mkdir()
                    if pg_base is not None:
                        url = create_database(pg_base, f"bench_q{n}")
                    else:
                        url = f"sqlite:///{work / 'bench.sqlite'}"
                    results.append(measure_one(database, url, n, files[n], work, args.repeats))
                    shutil.rmtree(work, ignore_errors=True)  # a 10× SQLite file is ~0.5 GB
        (args.workdir / "results.json").write_text(
            json.dumps([asdict(r) for r in results], indent=1, default=str) + "\n"
        )
    loads.append(f"{os.getloadavg()[0]:.2f}")
    body = render(results, (loads[0], loads[1]), args.repeats, pg_note)
    body += f"\n\nWhole run: {time.perf_counter() - started:.0f} s (`.venv/bin/python bench/scale.py {' '.join(sys.argv[1:])}`)."
    if args.no_write:
        print(body)
    else:
        write_section(TITLE, body)


if __name__ == "__main__":
    main()
