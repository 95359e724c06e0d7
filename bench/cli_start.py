"""Benchmark: how long ``rubric`` takes to start for commands that need no model and no analysis.

Each command runs as a fresh process, 10 times; the figures are the medians of its wall time and of
its CPU time (user + system: steadier than wall on a shared machine), next to the same run's
``python -c pass`` with the same interpreter (the floor no command can go under) and their ratio.
With ``--before DIR`` each run alternates with the same command from an older tree
(``git archive REV app migrations | tar -x -C DIR``), so before and after share the machine's load.
The database is a fresh SQLite file with the bundled sample collection imported (not timed), or
``--database-url URL`` (a copy of a 10× database, or PostgreSQL). The last column lists the heavy
modules the command imported (``-X importtime``): there should be none.

Run: ``.venv/bin/python bench/cli_start.py [--before DIR] [--database-url URL]`` (writes docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.report import machine, stamp, write_section  # noqa: E402

TITLE = "CLI start (`bench/cli_start.py`)"
REPEATS = 10
# Modules a command that needs no model and no analysis must not import (tests/test_cli_start.py).
HEAVY = (
    "numpy",
    "scipy",
    "pandas",
    "pytrec_eval",
    "ir_measures",
    "httpx",
    "fastapi",
    "starlette",
    "celery",
    "redis",
    "torch",
    "transformers",
    "openai",
    "jinja2",
    "nltk",
)
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("--help",),
    ("db", "--help"),
    ("export", "--help"),
    ("review", "--help"),
    ("leaderboard", "--help"),
    ("db", "upgrade"),
    ("collections",),
    ("prompts",),
)
# ``rubric ARGS`` as the installed script runs it (``from app.cli import main``), for either tree.
RUBRIC = "import sys; from app.cli import main; sys.argv[0] = 'rubric'; main()"


def cli(*args: str) -> list[str]:
    return [sys.executable, "-c", RUBRIC, *args]


def run_once(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of ``argv``; the tree is the one ``PYTHONPATH`` names."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # not the repository as cwd: `python -c` puts the cwd first on sys.path, ahead of PYTHONPATH
    subprocess.run(argv, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def medians(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)


def heavy_imports(argv: list[str], env: dict[str, str], cwd: Path) -> list[str]:
    """The heavy modules that ``-X importtime`` reports for one run."""
    importtime = [argv[0], "-X", "importtime", *argv[1:]]
    done = subprocess.run(importtime, env=env, cwd=cwd, check=True, capture_output=True, text=True)
    loaded = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return [name for name in HEAVY if name in loaded]


def sample_database(directory: Path, env: dict[str, str]) -> None:
    """A fresh SQLite database with the bundled sample collection, built through the CLI itself."""
    from app.samples import write_sample

    files = write_sample(directory / "sample")
    subprocess.run(cli("db", "upgrade"), env=env, cwd=directory, check=True, capture_output=True)
    paths = ["--queries", str(files.queries), "--passages", str(files.passages), "--bank", str(files.bank)]
    subprocess.run(cli("import", "sample", *paths), env=env, cwd=directory, check=True, capture_output=True)


def time_commands(env: dict[str, str], cwd: Path, before: Path | None) -> tuple[float, list[str]]:
    """The ``python -c pass`` median and one table row per command (before and after interleaved)."""
    old = {**env, "PYTHONPATH": str(before.resolve())} if before else None
    floor = medians([run_once([sys.executable, "-c", "pass"], env, cwd) for _ in range(REPEATS + 1)][1:])[0]
    rows = []
    for command in COMMANDS:
        now: list[tuple[float, float]] = []
        then: list[tuple[float, float]] = []
        for _ in range(REPEATS + 1):  # the first run of each tree warms the bytecode cache: not counted
            if old is not None:
                then.append(run_once(cli(*command), old, cwd))
            now.append(run_once(cli(*command), env, cwd))
        wall, cpu = medians(now[1:])
        was = "{:.3f} s / {:.3f} s | ".format(*medians(then[1:])) if then else ""
        heavy = ", ".join(heavy_imports(cli(*command), env, cwd)) or "none"
        rows.append(
            f"| `rubric {' '.join(command)}` | {was}{wall:.3f} s / {cpu:.3f} s | {wall / floor:.1f}× | {heavy} |"
        )
    return floor, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="time against this database (default: a fresh SQLite sample)")
    parser.add_argument("--before", type=Path, help="an older tree holding app/ and migrations/ to time alongside")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "RUBRIC_DATABASE_URL": args.database_url or f"sqlite:///{Path(tmp) / 'cli.sqlite'}"}
        env.pop("RUBRIC_REDIS_URL", None)
        # bytecode cached as an installed package has it (a PYTHONDONTWRITEBYTECODE=1 shell would time compiles)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.update(PYTHONPATH=str(REPO), PYTHONPYCACHEPREFIX=str(Path(tmp) / "pycache"))
        if args.database_url is None:
            sample_database(Path(tmp), env)
        floor, rows = time_commands(env, Path(tmp), args.before)
    database = "a fresh SQLite file with the sample collection" if args.database_url is None else "`--database-url`"
    was = "before: wall / CPU | " if args.before else ""
    body = "\n".join(
        [
            f"{stamp()} on {machine()}; database: {database}. Medians of {REPEATS} fresh processes (wall / CPU",
            f"time); the same run's `python -c pass` took {floor:.3f} s wall (the ratio's floor). Target: under 0.5 s."
            + (" Before: the tree before issue 16's lazy imports, run alternately with after." if args.before else ""),
            "",
            f"| command | {was}after: wall / CPU | wall × `python -c pass` | heavy modules imported |",
            "|---|---|---|---|" + ("---|" if args.before else ""),
            *rows,
        ]
    )
    write_section(TITLE, body)


if __name__ == "__main__":
    main()
