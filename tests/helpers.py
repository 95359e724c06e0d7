"""Small shared helpers for the tests."""

from __future__ import annotations

import gzip
import json
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
