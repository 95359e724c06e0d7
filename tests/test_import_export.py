"""Imports on SQLite and PostgreSQL: counts, idempotency, lossless round trip, and bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.models import (
    BankItem,
    Grade,
    Judgment,
    OfficialRank,
    Passage,
    PoolEntry,
    Query,
    RankingEntry,
    RubricVersion,
    System,
)
from tests.conftest import TEST_DATA, Database
from tests.helpers import cli, import_dev, interchange_records, write_jsonl

COUNTED = (Query, Passage, PoolEntry, System, RankingEntry, Judgment, Grade, BankItem, RubricVersion, OfficialRank)


def table_counts(db: Database) -> dict[str, int]:
    with db.session() as session:
        return {m.__tablename__: session.scalar(select(func.count()).select_from(m)) or 0 for m in COUNTED}


def grade_snapshot(db: Database) -> list[tuple]:
    with db.session() as session:
        return list(
            session.execute(
                select(Grade.pool_entry_pk, Grade.item_id, Grade.raw_answer, Grade.self_rating, Grade.correct).order_by(
                    Grade.pool_entry_pk, Grade.item_id
                )
            ).all()
        )


def test_import_counts_and_idempotency(dev_database: Database, dl19_dev: Path) -> None:
    """The session's import (``seeded_dev_*``: every dev file but the official ranks) has the expected
    rows; importing every file again, the ranks now with them, adds the ranks and changes no grade."""
    counts = {
        "query": 10,
        "passage": 2187,
        "pool_entry": 2187,
        "system": 37,
        "ranking_entry": 6681,
        "judgment": 2187,
        "grade": 21870,
        "bank_item": 100,
        "rubric_version": 1,
        "official_rank": 0,
    }
    assert table_counts(dev_database) == counts
    before = grade_snapshot(dev_database)
    official = TEST_DATA / "dl19_paper_official_ranks.json"
    import_dev(dl19_dev, "--official", official)
    counts["official_rank"] = 33
    assert table_counts(dev_database) == counts
    assert grade_snapshot(dev_database) == before
    cli("import", "dl19", "--official", official)
    assert table_counts(dev_database) == counts


def test_interchange_round_trip_is_lossless(dev_database: Database, dl19_dev: Path, tmp_path: Path) -> None:
    out = tmp_path / "export.jsonl.gz"
    cli("export", "passages", "dl19", "--out", out)
    original = list(interchange_records(dl19_dev / "passages-graded.jsonl.gz"))
    exported = list(interchange_records(out))
    assert exported == original
    # and importing the export into a second collection gives the same rows
    cli("import", "copy", "--passages", out)
    cli("export", "passages", "copy", "--out", tmp_path / "again.jsonl")
    assert list(interchange_records(tmp_path / "again.jsonl")) == original


def test_runs_and_qrels_round_trip(dev_database: Database, dl19_dev: Path, tmp_path: Path) -> None:
    cli("export", "runs", "dl19", "--out", tmp_path / "runs")
    run_files = sorted((tmp_path / "runs").glob("*.run"))
    assert len(run_files) == 37
    qrels = tmp_path / "manual.qrels"
    lines = []
    for query_id, paragraphs in interchange_records(dl19_dev / "passages-graded.jsonl.gz"):
        for p in paragraphs:
            lines.append(f"{query_id} 0 {p['paragraph_id']} {p['paragraph_data']['judgments'][0]['relevance']}\n")
    qrels.write_text("".join(lines))
    cli("import", "trec", "--queries", dl19_dev / "queries.json", "--runs", tmp_path / "runs", "--qrels", qrels)
    with dev_database.session() as session:
        trec = session.scalar(select(func.count()).select_from(RankingEntry).join(System).where(System.name != ""))
    assert trec == 2 * 6681
    a = cli("leaderboard", "dl19", "--measure", "P@20", "--min-rating", "3", "--format", "json")
    assert json.loads(a)["systems"]


# -- bad input --------------------------------------------------------------------------------


def _error_keeps_database(db: Database, args: list[str], *expected: str) -> None:
    before = table_counts(db)
    message = cli(*args, expect=2)
    for fragment in expected:
        assert fragment in message, message
    assert table_counts(db) == before


def test_truncated_gzip(dev_database: Database, dl19_dev: Path, tmp_path: Path) -> None:
    data = (dl19_dev / "passages-graded.jsonl.gz").read_bytes()
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(data[: len(data) // 2])
    _error_keeps_database(
        dev_database, ["import", "dl19", "--passages", str(broken)], "broken.jsonl.gz", "line", "truncated"
    )


def test_wrong_type_names_file_line_and_field(dev_database: Database, dl19_dev: Path, tmp_path: Path) -> None:
    records = list(interchange_records(dl19_dev / "passages-graded.jsonl.gz"))[:3]
    records[2][1][5]["paragraph_data"]["rankings"][0]["rank"] = "first"
    bad = write_jsonl(tmp_path / "bad.jsonl", records)
    _error_keeps_database(
        dev_database, ["import", "dl19", "--passages", str(bad)], "bad.jsonl, line 3", "paragraph_data.rankings[0].rank"
    )


def test_duplicate_ids(database: Database, tmp_path: Path) -> None:
    cli("import", "x", "--queries", write_queries(tmp_path))
    paragraph = {"paragraph_id": "p1", "text": "t", "paragraph_data": {"judgments": [], "rankings": []}}
    bad = write_jsonl(tmp_path / "dup.jsonl", [["q1", [paragraph, paragraph]]])
    _error_keeps_database(
        database, ["import", "x", "--passages", str(bad)], "dup.jsonl, line 1", "duplicate paragraph id 'p1'"
    )
    run = tmp_path / "dup.run"
    run.write_text("q1 Q0 d1 1 2.0 r\nq1 Q0 d1 2 1.0 r\n")
    _error_keeps_database(database, ["import", "x", "--runs", str(run)], "dup.run, line 2", "docno")


def write_queries(tmp_path: Path) -> Path:
    path = tmp_path / "queries.json"
    path.write_text(json.dumps({"q1": "first query", "q2": "second query"}, indent=1))
    return path


def test_unknown_systems_and_queries(database: Database, tmp_path: Path) -> None:
    cli("import", "x", "--queries", write_queries(tmp_path))
    run = tmp_path / "ok.run"
    run.write_text("q1 Q0 d1 1 2.0 sysA\n")
    cli("import", "x", "--runs", run)
    official = tmp_path / "official.json"
    official.write_text('{\n "sysA": 1,\n "sysB": 2\n}\n')
    _error_keeps_database(database, ["import", "x", "--official", str(official)], "official.json, line 3", "sysB")
    stray = tmp_path / "stray.run"
    stray.write_text("q1 Q0 d1 1 2.0 sysC\nq9 Q0 d2 2 1.0 sysC\n")
    _error_keeps_database(database, ["import", "x", "--runs", str(stray)], "stray.run, line 2", "query 'q9'")


def test_empty_file_and_a_later_error_roll_back_everything(database: Database, tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl.gz"
    with gzip.open(empty, "wt") as handle:
        handle.write("")
    _error_keeps_database(database, ["import", "x", "--passages", str(empty)], "empty.jsonl.gz", "file is empty")
    # The queries file is fine, the qrels file is not: neither lands.
    bad_qrels = tmp_path / "bad.qrels"
    bad_qrels.write_text("q1 0 d1 2\nq1 0 d2 high\n")
    _error_keeps_database(
        database,
        ["import", "y", "--queries", str(write_queries(tmp_path)), "--qrels", str(bad_qrels)],
        "bad.qrels, line 2",
        "rel",
    )


def test_changed_passage_text_is_refused(database: Database, tmp_path: Path) -> None:
    cli("import", "x", "--queries", write_queries(tmp_path))
    first = {"paragraph_id": "p1", "text": "one", "paragraph_data": {"judgments": [], "rankings": []}}
    cli("import", "x", "--passages", write_jsonl(tmp_path / "a.jsonl", [["q1", [first]]]))
    changed = dict(first, text="two")
    _error_keeps_database(
        database,
        ["import", "x", "--passages", str(write_jsonl(tmp_path / "b.jsonl", [["q2", [changed]]]))],
        "b.jsonl",
        "different text",
    )


@pytest.mark.parametrize("fmt", ["items", "questions"])
def test_bank_formats_and_versions(sqlite_db: Database, dl19_dev: Path, tmp_path: Path, fmt: str) -> None:
    cli("import", "dl20", "--bank", dl19_dev.parent / "dl20-questions.jsonl.gz")
    nuggets = {
        "query_id": "940547",
        "test_collection": "t",
        "query_text": "when did rock n roll begin?",
        "items": [{"query_id": "940547", "nugget_id": "940547/n1", "nugget_text": "Early 1950s"}],
    }
    cli("import", "dl20", "--bank", write_jsonl(tmp_path / "nuggets.jsonl", [nuggets]))
    with sqlite_db.session() as session:
        versions = session.scalars(select(RubricVersion.number).order_by(RubricVersion.number)).all()
        kinds = dict(session.execute(select(BankItem.kind, func.count()).group_by(BankItem.kind)).all())
    assert versions == [1, 2]
    assert kinds["nugget"] == 1 and kinds["question"] > 100
    cli("import", "dl20", "--bank", tmp_path / "nuggets.jsonl")  # unchanged: no third version
    with sqlite_db.session() as session:
        assert session.scalar(select(func.max(RubricVersion.number))) == 2
