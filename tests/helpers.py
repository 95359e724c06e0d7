"""Small shared helpers for the tests."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from app.cli import app

runner = CliRunner()


def cli(*args: str, expect: int = 0) -> str:
    """Run ``rubric ARGS`` in-process; assert the exit code; return stdout."""
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == expect, (
        f"exit {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}\nexception: {result.exception!r}"
    )
    return result.stdout if expect == 0 else result.stderr


def interchange_records(path: Path) -> Iterator[Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            yield json.loads(line)


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def import_dev(dl19_dev: Path, *extra: str | Path) -> None:
    """Import the DL19 dev queries, graded passages and question bank as collection ``dl19``."""
    cli(
        "import",
        "dl19",
        "--queries",
        str(dl19_dev / "queries.json"),
        "--passages",
        str(dl19_dev / "passages-graded.jsonl.gz"),
        "--bank",
        str(dl19_dev / "questions.jsonl.gz"),
        *(str(e) for e in extra),
    )


_showcases: dict[Path, Path] = {}
# bench/evaluate.py's synthetic collection at DL19's shape (dl19-dev: 43 queries, 37 runs), with a
# pool of 25 passages per query (DL19 pools ~200: their import alone would take minutes in CI).
DL19_SHAPE = {"N_QUERIES": 43, "N_SYSTEMS": 37, "N_ITEMS": 10, "DEPTH": 20, "POOL_PER_QUERY": 25}


def showcase(directory: Path, template: Path) -> Path:
    """``build_showcase`` once per test process (screenshots and axe share it; the pages only read it)."""
    if template not in _showcases:
        _showcases[template] = build_showcase(directory, template)
    return _showcases[template]


def build_showcase(directory: Path, template: Path) -> Path:
    """A SQLite file holding every page's data, for the browser-only checks (screenshots, axe):

    ``sample`` (imported, graded by the default grader: a finished job, history) and ``dl``, the
    synthetic collection of bench/web.py cut to DL19's shape (DL19_SHAPE: 43 queries × 10 items,
    37 systems, graded; its full bench size takes minutes to import), with one user per role of
    tests/web/conftest.py. ``template`` is the migrated empty database.
    """
    import shutil

    import pytest

    import bench.evaluate
    from app.accounts.service import create_user
    from app.config import get_settings
    from app.db import engine_for, session_scope
    from bench.web import build_dl
    from tests.conftest import Database, _drain_embedded_worker
    from tests.grading.conftest import import_sample
    from tests.jobs.helpers import launch, wait_job
    from tests.web.conftest import PASSWORDS

    path = directory / "showcase.sqlite"
    shutil.copy(template, path)
    url = f"sqlite:///{path}"
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("RUBRIC_DATABASE_URL", url)
        monkeypatch.delenv("RUBRIC_REDIS_URL", raising=False)
        for name, value in DL19_SHAPE.items():
            monkeypatch.setattr(bench.evaluate, name, value)
        get_settings.cache_clear()
        engine = engine_for(url)
        try:
            import_sample(directory)
            database = Database(url, engine, "sqlite")
            wait_job(database, launch(database))
            build_dl(directory)
            with session_scope() as session:
                for role, password in PASSWORDS.items():
                    create_user(session, role, role, password)
            _drain_embedded_worker()
        finally:
            engine.dispose()
            engine_for.cache_clear()
            get_settings.cache_clear()
    return path


OVERSIGHT_CELL = re.compile(r"<td([^>]*)>(.*?)</td>", re.S)


def oversight_rows(html: str) -> list[list[str]]:
    """An oversight table's rows in the CLI's columns: a question cell gives back its item id
    (``data-item``) and text (the ``title``, uncut); the flag column is the web's own and is left out."""
    body = html.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    rows = []
    for row in re.split(r"<tr[ >]", body)[1:]:
        cells: list[str] = []
        for attrs, inner in OVERSIGHT_CELL.findall(row):
            item = re.search(r'data-item="([^"]*)"', attrs)
            if item:
                title = re.search(r'title="([^"]*)"', inner)
                cells += [item.group(1), title.group(1) if title else ""]
            elif "flag-cell" not in attrs:
                cells.append(inner)
        rows.append(cells)
    return rows
