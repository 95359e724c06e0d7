"""CLI messages hold user data verbatim: Rich markup, emoji codes and brackets are never interpreted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Database
from tests.grading.conftest import import_sample
from tests.helpers import cli


@pytest.fixture
def sample(database: Database, tmp_path: Path) -> Database:
    import_sample(tmp_path)
    return database


@pytest.mark.parametrize("query_id", ["[/x]", "[bold]x[/bold]", "[red]", ":smile:", "\\[x]"])
def test_a_query_id_in_an_error_prints_verbatim(sample: Database, tmp_path: Path, query_id: str) -> None:
    run = tmp_path / "run.txt"
    run.write_text(f"{query_id} Q0 bees-1 1 2.0 newrun\n", encoding="utf-8")
    stderr = cli("import", "sample", "--runs", run, expect=2)
    assert stderr.startswith("error: ") and stderr.count("\n") == 1
    assert f"run.txt, line 1, field 'query_id': query {query_id!r} is not in collection 'sample'" in stderr


def test_a_bracketed_message_keeps_its_brackets(sample: Database, tmp_path: Path) -> None:
    qrels = tmp_path / "q.qrels"
    qrels.write_text("[bold]x 0 bees-1 2\n", encoding="utf-8")
    stderr = cli("import", "sample", "--qrels", qrels, expect=2)
    assert stderr.startswith("error: ") and "q.qrels, line 1" in stderr and "'[bold]x'" in stderr


@pytest.mark.parametrize("name", ["[/x]", "team/a", "a b", "..", "x" * 101, "naïve"])
def test_a_collection_name_outside_the_safe_set_is_refused(sqlite_db: Database, tmp_path: Path, name: str) -> None:
    queries = tmp_path / "queries.json"
    queries.write_text('{"q1": "a query"}', encoding="utf-8")
    stderr = cli("import", name, "--queries", queries, expect=2)
    assert stderr.startswith(f"error: collection name {name!r} is not allowed: use 1 to 100 characters")
    assert name not in cli("collections")
