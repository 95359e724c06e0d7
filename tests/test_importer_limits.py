"""Importers refuse what a database cannot store, alike on SQLite and PostgreSQL, and store nothing.

Each hostile file is imported with ``rubric import`` into the sample collection: the command exits
2 with the file, line and field in its message, and every table keeps its rows.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.collections.readers import MAX_JSON_DEPTH, json_depth_exceeds, load_json
from app.models import Base
from tests.conftest import Database
from tests.grading.conftest import import_sample
from tests.helpers import cli

HUGE = str(10**23)
DEEP = "[" * 100_000 + "]" * 100_000

# (option, file name, content, what the message must name)
BAD_FILES = {
    "run-nan-score": ("--runs", "a.run", "bees Q0 p1 1 nan tag\n", ["line 1", "'score'"]),
    "run-inf-score": ("--runs", "a.run", "bees Q0 p1 1 -Infinity tag\n", ["line 1", "'score'"]),
    "run-overflow-score": ("--runs", "a.run", "bees Q0 p1 1 1e999 tag\n", ["line 1", "'score'"]),
    "run-huge-rank": ("--runs", "a.run", f"bees Q0 p1 {HUGE} 1.0 tag\n", ["line 1", "'rank'"]),
    "run-negative-rank": ("--runs", "a.run", "bees Q0 p1 -1 1.0 tag\n", ["line 1", "'rank'"]),
    "run-long-docno": ("--runs", "a.run", f"bees Q0 {'d' * 301} 1 1.0 tag\n", ["line 1", "'docno'", "300"]),
    "run-long-tag": ("--runs", "a.run", f"bees Q0 p1 1 1.0 {'t' * 201}\n", ["line 1", "'tag'", "200"]),
    "run-nul": ("--runs", "a.run", "bees Q0 p\x001 1 1.0 tag\n", ["line 1", "NUL"]),
    "qrels-huge-grade": ("--qrels", "a.qrels", f"bees 0 p1 {HUGE}\n", ["line 1", "'rel'"]),
    "qrels-long-docno": ("--qrels", "a.qrels", f"bees 0 {'d' * 301} 1\n", ["line 1", "'docno'"]),
    "official-nan": ("--official", "o.json", '{"bm25": NaN}', ["o.json", "NaN"]),
    "official-infinity": ("--official", "o.json", '{"bm25": Infinity}', ["o.json", "Infinity"]),
    "official-overflow": ("--official", "o.json", '{"bm25": 1e999}', ["o.json", "number"]),
    "official-huge-int": ("--official", "o.json", '{"bm25": ' + "9" * 5000 + "}", ["o.json", "number"]),
    "official-deep": ("--official", "o.json", DEEP, ["o.json", "nested deeper"]),
    "queries-deep": ("--queries", "q.json", DEEP, ["q.json", "nested deeper"]),
    "queries-long-id": ("--queries", "q.json", '{"' + "q" * 201 + '": "text"}', ["q.json", "'query_id'"]),
    "queries-nul": ("--queries", "q.json", '{"q": "a\\u0000b"}', ["q.json", "NUL"]),
    "passages-deep": ("--passages", "p.jsonl", DEEP + "\n", ["line 1", "nested deeper"]),
    "passages-nan-markup": (
        "--passages",
        "p.jsonl",
        '["bees", [{"paragraph_id": "p", "text": "t", "paragraph": NaN}]]\n',
        ["line 1", "NaN"],
    ),
    "passages-nul-text": (
        "--passages",
        "p.jsonl",
        '["bees", [{"paragraph_id": "p", "text": "a\\u0000b"}]]\n',
        ["line 1", "[1][0].text", "NUL"],
    ),
    "passages-long-id": (
        "--passages",
        "p.jsonl",
        '["bees", [{"paragraph_id": "' + "p" * 301 + '", "text": "t"}]]\n',
        ["line 1", "paragraph_id"],
    ),
    "passages-huge-rank": (
        "--passages",
        "p.jsonl",
        '["bees", [{"paragraph_id": "p", "text": "t", "paragraph_data": {"rankings": '
        f'[{{"method": "m", "rank": {HUGE}, "score": 1}}]}}}}]]\n',
        ["line 1", "rank"],
    ),
    "passages-inf-score": (
        "--passages",
        "p.jsonl",
        '["bees", [{"paragraph_id": "p", "text": "t", "paragraph_data": {"rankings": '
        '[{"method": "m", "rank": 1, "score": 1e999}]}}]]\n',
        ["line 1", "number"],
    ),
    "passages-huge-judgment": (
        "--passages",
        "p.jsonl",
        '["bees", [{"paragraph_id": "p", "text": "t", "paragraph_data": {"judgments": '
        f'[{{"relevance": {HUGE}}}]}}}}]]\n',
        ["line 1", "relevance"],
    ),
    "passages-long-model": (
        "--passages",
        "p.jsonl",
        '["bees", [{"paragraph_id": "p", "text": "t", "exam_grades": [{"llm": "' + "m" * 301 + '"}]}]]\n',
        ["line 1", "llm"],
    ),
    "passages-long-query": ("--passages", "p.jsonl", '["' + "q" * 201 + '", []]\n', ["line 1", "'query_id'"]),
    "bank-deep": ("--bank", "b.jsonl", DEEP + "\n", ["line 1", "nested deeper"]),
    "nuggets-unbalanced": ("--nuggets", "n.jsonl", "[" * 100_000 + "\n", ["line 1", "nested deeper"]),
    "bank-long-item": (
        "--bank",
        "b.jsonl",
        '{"query_id": "bees", "items": [{"question_id": "' + "i" * 301 + '", "question_text": "?"}]}\n',
        ["line 1", "question_id"],
    ),
    "responses-nan": ("--responses", "r.jsonl", '{"run_id": "s", "topic_id": "bees", "answer": NaN}\n', ["NaN"]),
    "responses-long-run": (
        "--responses",
        "r.jsonl",
        '{"run_id": "' + "s" * 201 + '", "topic_id": "bees", "answer": [{"text": "x"}]}\n',
        ["line 1", "'run_id'"],
    ),
}


def _counts(db: Database) -> dict[str, int]:
    with db.session() as session:
        return {t.name: session.scalar(select(func.count()).select_from(t)) or 0 for t in Base.metadata.sorted_tables}


@pytest.fixture
def sample(database: Database, tmp_path: Path) -> Database:
    import_sample(tmp_path)
    return database


@pytest.mark.parametrize("case", list(BAD_FILES), ids=list(BAD_FILES))
def test_a_hostile_file_is_refused_with_its_location_and_stores_nothing(
    sample: Database, tmp_path: Path, case: str
) -> None:
    option, name, content, expected = BAD_FILES[case]
    path = tmp_path / name
    path.write_bytes(content.encode("utf-8"))
    before = _counts(sample)
    message = " ".join(cli("import", "sample", option, str(path), expect=2).split())
    for fragment in expected:
        assert fragment in message, message
    assert _counts(sample) == before


def test_a_nul_inside_gzip_is_refused(sample: Database, tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl.gz"
    path.write_bytes(gzip.compress(b'["bees", [{"paragraph_id": "p\x00", "text": "t"}]]\n'))
    assert "NUL" in cli("import", "sample", "--passages", str(path), expect=2)


def test_depth_is_measured_without_parsing() -> None:
    nested = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert not json_depth_exceeds(nested)
    assert json_depth_exceeds("[" + nested + "]")
    assert not json_depth_exceeds('["' + "[" * 100 + '"]')  # brackets inside a string do not nest
    assert load_json("f", 1, '{"a": [1, 2.5, "x"]}') == {"a": [1, 2.5, "x"]}
    assert load_json("f", 1, '{"a": 1e300}') == {"a": 1e300}


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("leaderboard", "sample", "--measure", "cover", "--bootstrap", "1000000000"), "--bootstrap"),
        (("leaderboard", "sample", "--measure", "cover", "--bootstrap", "-5"), "--bootstrap"),
        (("leaderboard", "sample", "--measure", "cover", "--top-k", "0"), "--top-k"),
        (("leaderboard", "sample", "--measure", "NDCG@99999999999999999999"), "cut-off"),
        (("leaderboard", "sample", "--measure", "cover", "--label", "min-answers:0"), "label rule"),
        (("agreement", "sample", "--min-judgment", "99999999999999999999"), "--min-judgment"),
        (("agreement", "sample", "--min-answers", "0"), "--min-answers"),
        (("verify", "sample", "bad-questions", "--limit", "-1"), "--limit"),
    ],
    ids=lambda value: " ".join(value[2:]) if isinstance(value, tuple) else None,
)
def test_a_command_refuses_an_unbounded_option_naming_it(
    sqlite_db: Database, args: tuple[str, ...], named: str
) -> None:
    assert named in " ".join(cli(*args, expect=2).split())
