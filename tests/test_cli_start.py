"""``rubric`` starts without the heavy libraries: commands that need no model and no analysis import
neither the science stack nor the web stack (issue 16; the times are in bench/cli_start.py, not here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import typer
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from app.cli import UNMIGRATED, app
from app.collections import summaries
from app.collections.service import ensure_collection
from app.migrate import MIGRATIONS_DIR, alembic_config, downgrade, head_from_files
from app.models import Collection, Passage, Query, System
from bench.cli_start import HEAVY
from tests.conftest import Database
from tests.helpers import cli

# Runs each argv list through the CLI in one fresh process, then prints the exit codes and every module loaded.
RUN_AND_LIST_MODULES = """
import json, sys
from app.cli import app
codes = []
for argv in json.loads(sys.argv[1]):
    try:
        app(args=argv, prog_name="rubric")
    except SystemExit as done:
        codes.append(done.code or 0)
print("\\nMODULES " + json.dumps({"codes": codes, "modules": sorted(sys.modules)}))
"""


def run_fresh(*commands: list[str]) -> tuple[str, list[int], set[str]]:
    """(stdout, exit codes, loaded modules) of ``commands`` run one after another in a new interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST_MODULES, json.dumps(commands)],
        capture_output=True,
        text=True,
        check=True,
    )
    output, _, report = done.stdout.rpartition("\nMODULES ")
    parsed = json.loads(report)
    return output, parsed["codes"], set(parsed["modules"])


def heavy(modules: set[str]) -> list[str]:
    return sorted(name for name in modules if name in HEAVY or name.split(".")[0] in HEAVY)


def test_help_loads_no_database_layer_and_no_heavy_module() -> None:
    output, codes, modules = run_fresh(["--help"], ["db", "--help"], ["leaderboard", "--help"])
    assert codes == [0, 0, 0] and "Usage" in output and "--measure" in output
    assert heavy(modules) == []
    # the help needs the commands' signatures only: no SQLAlchemy, settings or service behind them
    assert not {"sqlalchemy", "pydantic_settings", "app.db", "app.config", "app.leaderboards.service"} & modules


def test_trivial_database_commands_load_no_heavy_module(database: Database) -> None:
    with database.session() as session:
        ensure_collection(session, "listed")
        session.commit()
    output, codes, modules = run_fresh(["db", "upgrade"], ["collections"], ["prompts"])
    assert codes == [0, 0, 0]
    assert "listed\t0\t0\t0" in output.splitlines() and "QuestionSelfRatedUnanswerablePromptWithChoices" in output
    assert heavy(modules) == []
    assert "rich.table" not in modules and "app.leaderboards.service" not in modules
    # at head, `db upgrade` skips Alembic and the listing reads through a plain connection: no ORM, no models
    assert not {"alembic", "sqlalchemy.orm", "app.models"} & modules


def _command_paths(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and group under ``command`` (typer's own click groups hold theirs in ``commands``)."""
    paths = [path]
    for name, sub in getattr(command, "commands", {}).items():
        paths += _command_paths(sub, (*path, name))
    return paths


def test_every_command_still_parses_its_help() -> None:
    paths = _command_paths(typer.main.get_command(app))
    assert len(paths) > 30 and ("export", "bundle") in paths and ("collections", "rename") in paths
    runner = CliRunner()
    for path in paths:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Usage" in result.output and "--help" in result.output


def test_a_database_error_is_still_mapped_to_exit_2(tmp_path: Path) -> None:
    """SQLAlchemy now loads inside ``_user_errors``: an unmigrated database still gives ``error:`` and exit 2."""
    empty = {**os.environ, "RUBRIC_DATABASE_URL": f"sqlite:///{tmp_path / 'empty.sqlite'}"}
    done = subprocess.run([sys.executable, "-m", "app.cli", "collections"], env=empty, capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.startswith("error: the database lacks the workbench's tables")


def test_an_older_database_is_still_refused_and_upgraded(database: Database) -> None:
    """The listing reads only columns every schema has, so it checks the revision itself; ``db upgrade``
    hands a database below the head to Alembic, as before."""
    downgrade(database.url, "-1")
    assert cli("collections", expect=2) == f"error: {UNMIGRATED}\n"
    cli("db", "upgrade")
    cli("collections")


def test_the_head_read_from_the_files_is_alembics() -> None:
    from alembic.script import ScriptDirectory

    assert head_from_files() == ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def _version(directory: Path, revision: str, down: str) -> None:
    text = f"revision: str = {revision!r}\ndown_revision: str | None = {down}\n"
    (directory / f"{revision}_x.py").write_text(f'"""Revision ID: {revision}"""\n\n{text}', encoding="utf-8")


def test_a_head_the_files_do_not_show_plainly_is_left_to_alembic(tmp_path: Path) -> None:
    _version(tmp_path, "a", "None")
    _version(tmp_path, "b", "'a'")
    assert head_from_files(tmp_path) == "b"
    _version(tmp_path, "c", "'a'")  # a second branch: two heads
    assert head_from_files(tmp_path) is None
    _version(tmp_path, "d", "('b', 'c')")  # their merge: parents as a tuple
    assert head_from_files(tmp_path) is None
    assert head_from_files(MIGRATIONS_DIR / "versions") is not None


def _orm_summaries(session: Session) -> list[tuple[str, int, int, int]]:
    """The slow oracle: one ORM count per collection and table."""
    return [
        (
            c.name,
            *(
                session.scalar(select(func.count()).where(m.collection_id == c.id)) or 0
                for m in (Query, Passage, System)
            ),
        )
        for c in session.scalars(select(Collection).order_by(Collection.name))
    ]


def test_the_plain_listing_matches_the_orm_one(dev_database: Database) -> None:
    with dev_database.session() as session:
        ensure_collection(session, "empty")
        session.commit()
        listed = summaries.collection_summaries(session.connection())
        assert listed == _orm_summaries(session)
        assert [row[0] for row in listed] == ["dl19", "empty"]
    # the lightweight tables name the models' tables and columns
    assert summaries.COLLECTION.name == Collection.__tablename__
    assert {c.name for c in summaries.COLLECTION.c} <= set(Collection.__table__.c.keys())
    for counted, model in zip(summaries.COUNTED, (Query, Passage, System), strict=True):
        assert counted.name == model.__tablename__ and "collection_id" in model.__table__.c


GC_CHECK = """
import gc, os
from app.cli import collect_garbage_after
collect_garbage_after(0.0).join()
assert gc.isenabled()
from app.collector import paused
with paused():  # an import that outlives the start-up pause keeps the collector paused to its end
    collect_garbage_after(0.0).join()
    assert not gc.isenabled()
assert gc.isenabled()
collect_garbage_after(600.0)
assert not gc.isenabled()
child = os.fork()
if child == 0:
    os._exit(0 if gc.isenabled() else 1)
assert os.waitpid(child, 0)[1] == 0
"""


def test_the_script_collects_garbage_again_after_its_start_and_in_forked_children() -> None:
    subprocess.run([sys.executable, "-c", GC_CHECK], check=True)
