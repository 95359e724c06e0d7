"""Benchmark: how long ``rubric`` takes to start for commands that need no model and no analysis.

Each command runs as a fresh process, 10 times; the figures are the medians of its wall time and of
its CPU time (user + system: steadier than wall on a shared machine), next to the same run's
``python -c pass`` with the same interpreter (the floor no command can go under) and their ratio.
With ``--before DIR`` each run alternates with the same command from an older tree
(``git archive REV app | tar -x -C DIR`` plus today's ``migrations/``, so both trees accept the same
database), so before and after share the machine's load.
Each database (``--databases``: SQLite, PostgreSQL on a throwaway cluster of bench/postgres.py) is
fresh, upgraded and holds the bundled sample collection (not timed); ``--database-url URL`` times one
given database instead (a copy of a 10× database). The last columns list the heavy modules the command
imported (``-X importtime``): there should be none; and whether it loaded the ORM or Alembic.

Run: ``.venv/bin/python bench/cli_start.py [--before DIR] [--databases sqlite,postgresql] [--database-url URL]``
(writes docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import contextlib
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
# Loaded only by commands that need them: a command that just reads (``collections``, ``db upgrade`` at the
# head) should load neither (tests/test_cli_start.py).
ORM_AND_ALEMBIC = ("sqlalchemy.orm", "alembic")
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


def loaded_modules(argv: list[str], env: dict[str, str], cwd: Path) -> set[str]:
    """The modules that ``-X importtime`` reports for one run."""
    importtime = [argv[0], "-X", "importtime", *argv[1:]]
    done = subprocess.run(importtime, env=env, cwd=cwd, check=True, capture_output=True, text=True)
    return {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}


def sample_database(directory: Path, env: dict[str, str]) -> None:
    """The bundled sample collection in the fresh database ``env`` names, imported through the CLI itself."""
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
        loaded = loaded_modules(cli(*command), env, cwd)
        heavy = ", ".join(name for name in HEAVY if name in loaded) or "none"
        orm = ", ".join(name for name in ORM_AND_ALEMBIC if name in loaded) or "neither"
        rows.append(
            f"| `rubric {' '.join(command)}` | {was}{wall:.3f} s / {cpu:.3f} s | {wall / floor:.1f}× | {heavy} | {orm} |"
        )
    return floor, rows


def table(env: dict[str, str], cwd: Path, before: Path | None, database: str) -> list[str]:
    """One database's paragraph and table."""
    floor, rows = time_commands(env, cwd, before)
    was = "before: wall / CPU | " if before else ""
    return [
        f"**{database}**: the same run's `python -c pass` took {floor:.3f} s wall (the ratio's floor).",
        "",
        f"| command | {was}after: wall / CPU | wall × `python -c pass` | heavy modules imported | ORM / Alembic loaded |",
        "|---|---|---|---|---|" + ("---|" if before else ""),
        *rows,
        "",
    ]


def fresh_url(database: str, directory: Path, stack: contextlib.ExitStack) -> str:
    if database == "sqlite":
        return f"sqlite:///{directory / 'cli.sqlite'}"
    from bench.postgres import create_database, local_postgres

    return create_database(stack.enter_context(local_postgres()), "cli_start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--databases", default="sqlite,postgresql", help="sqlite, postgresql or both (fresh, with the sample)"
    )
    parser.add_argument("--database-url", help="time against this database instead")
    parser.add_argument("--before", type=Path, help="an older tree holding app/ and migrations/ to time alongside")
    args = parser.parse_args()
    databases = ["given"] if args.database_url else [name.strip() for name in args.databases.split(",")]
    if not set(databases) <= {"sqlite", "postgresql", "given"}:
        raise SystemExit(f"error: unknown database in {args.databases!r}: use sqlite, postgresql or both")
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        for database in databases:
            directory = Path(tmp) / database
            directory.mkdir()
            url = args.database_url or fresh_url(database, directory, stack)
            env = {**os.environ, "RUBRIC_DATABASE_URL": url}
            env.pop("RUBRIC_REDIS_URL", None)
            # bytecode cached as an installed package has it (a PYTHONDONTWRITEBYTECODE=1 shell would time compiles)
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env.update(PYTHONPATH=str(REPO), PYTHONPYCACHEPREFIX=str(Path(tmp) / "pycache"))
            if database != "given":
                sample_database(directory, env)
            label = {"sqlite": "SQLite", "postgresql": "PostgreSQL (bench/postgres.py)"}.get(
                database, "`--database-url`"
            )
            lines += table(env, directory, args.before, label)
    note = ""
    if "postgresql" in databases:
        from bench.postgres import DURABILITY_NOTE

        note = f" {DURABILITY_NOTE}."
    before = (
        " Before: the tree at the previous measurement (`git archive` of its app/, today's migrations/), run"
        " alternately with after."
        if args.before
        else ""
    )
    body = "\n".join(
        [
            f"{stamp()} on {machine()}; load average {os.getloadavg()[0]:.2f} at the end. Each database is fresh,"
            f" upgraded, with the sample collection. Medians of {REPEATS} fresh processes (wall / CPU time)."
            f" Target: under 0.5 s wall.{before}{note}",
            "",
            *lines,
        ]
    )
    write_section(TITLE, body)


if __name__ == "__main__":
    main()
