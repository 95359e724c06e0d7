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
from typer.testing import CliRunner

from app.cli import app
from app.collections.service import ensure_collection
from bench.cli_start import HEAVY
from tests.conftest import Database

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
