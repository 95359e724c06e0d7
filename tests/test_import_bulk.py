"""The bulk import path (app/collections/bulk.py) on SQLite and PostgreSQL (COPY + insert-select).

Small batches make every file span several batches, so these tests see what a large import does:
the stored rows, upserts on re-import, hostile text through COPY, and nothing written after an error.
"""

from __future__ import annotations

import gc
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError

from app.collections import service
from app.collections.bulk import WRITER_THREAD, SerialWriter
from app.collections.errors import ImportFormatError
from app.collections.service import ensure_collection, import_interchange
from app.collector import pause
from app.collector import paused as collector_paused
from app.db import session_scope
from app.models import Collection, Grade, Grader, Judgment, Passage, PoolEntry, Query, RankingEntry, System
from tests.conftest import Database
from tests.helpers import write_jsonl

# Text COPY's text format must escape: tabs, newlines, backslashes, its NULL marker, quotes, unicode.
HOSTILE = 'tab\there\nnew line \\ back\\slash \\N "quoted" ünïcødé 🐝'


def _exam(answers: list[tuple[str, str]], ratings: dict[str, int], correct: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "correctAnswered": correct,
        "wrongAnswered": [item for item, _ in answers if item not in correct],
        "answers": [list(pair) for pair in answers],
        "llm": "judge",
        "prompt_info": {"prompt_class": "QuestionSelfRatedUnanswerablePromptWithChoices"},
        "self_ratings": [{"question_id": item, "self_rating": r} for item, r in ratings.items()],
        **extra,
    }


def _paragraph(pid: str, rankings: list[tuple[str, int]], exam: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "paragraph_id": pid,
        "text": f"text of {pid} {HOSTILE}",
        "paragraph_data": {
            "judgments": extra.pop("judgments", []),
            "rankings": [{"method": m, "rank": r, "score": 100.0 - r} for m, r in rankings],
        },
        "exam_grades": [exam],
        **extra,
    }


def _first_file(tmp_path: Path) -> Path:
    return write_jsonl(
        tmp_path / "first.jsonl",
        [
            [
                "q1",
                [
                    _paragraph(
                        "p1",
                        [("sysA", 1), ("sysB", 2)],
                        _exam([("i1", HOSTILE), ("i2", "b")], {"i1": 5, "i2": 0}, ["i1"]),
                        judgments=[{"relevance": 2, "titleQuery": "q1"}],
                    ),
                    _paragraph(
                        "p2",
                        [("sysA", 2)],
                        _exam([("i1", "c")], {"i1": 3}, [], llm_response_errors={"i9": {"why": HOSTILE}}),
                        grades=[{"correctAnswered": True, "answer": "yes\t!", "llm": "direct", "self_ratings": 4}],
                    ),
                ],
            ],
            ["q2", [_paragraph("p3", [("sysB", 1)], _exam([("i1", "d")], {"i1": 1}, ["i1"]))]],
        ],
    )


def _writer_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(WRITER_THREAD)]


def _import(db: Database, path: Path, batch_size: int = 2) -> dict[str, int]:
    """Import ``path``; on PostgreSQL its batches must go through the background writer, which must be gone after."""
    during: list[str] = []
    with session_scope(db.engine) as session:
        collection = ensure_collection(session, "bulk")
        try:
            report = import_interchange(
                session, collection, path, lambda _: during.extend(_writer_threads()), batch_size=batch_size
            )
        finally:
            assert _writer_threads() == []  # the writer never outlives the import, failed or not
    assert bool(during) == (db.backend == "postgresql")
    return report.counts


def _contents(db: Database) -> dict[str, set[tuple[Any, ...]]]:
    """Every imported table by natural keys, so that two databases' rows compare equal."""
    with db.session() as session:
        entry = (Query.query_id, Passage.passage_id)
        pooled = select(*entry).join(PoolEntry, PoolEntry.query_pk == Query.id).join(Passage)
        return {
            "passages": set(session.execute(select(Passage.passage_id, Passage.text))),
            "rankings": set(
                session.execute(
                    pooled.add_columns(System.name, RankingEntry.rank, RankingEntry.score, RankingEntry.position)
                    .join(RankingEntry, RankingEntry.pool_entry_pk == PoolEntry.id)
                    .join(System)
                )
            ),
            "judgments": set(
                session.execute(
                    pooled.add_columns(Judgment.ordinal, Judgment.relevance, Judgment.title_query).join(Judgment)
                )
            ),
            "grades": {
                (*row[:9], json.dumps(row[9]))
                for row in session.execute(
                    pooled.add_columns(
                        Grader.model,
                        Grade.item_id,
                        Grade.position,
                        Grade.raw_answer,
                        Grade.self_rating,
                        Grade.correct,
                        Grade.extracted_answer,
                    )
                    .add_columns(Grade.error)
                    .join(Grade, Grade.pool_entry_pk == PoolEntry.id)
                    .join(Grader)
                )
            },
        }


def _grade(q: str, p: str, model: str, item: str, pos: int, answer: str, rating: int, correct: bool | None) -> tuple:
    return (q, p, model, item, pos, answer, rating, correct, None, "null")


FIRST = {
    "passages": {(p, f"text of {p} {HOSTILE}") for p in ("p1", "p2", "p3")},
    "rankings": {
        ("q1", "p1", "sysA", 1, 99.0, 0),
        ("q1", "p1", "sysB", 2, 98.0, 1),
        ("q1", "p2", "sysA", 2, 98.0, 0),
        ("q2", "p3", "sysB", 1, 99.0, 0),
    },
    "judgments": {("q1", "p1", 0, 2, "q1")},
    "grades": {
        _grade("q1", "p1", "judge", "i1", 0, HOSTILE, 5, True),
        _grade("q1", "p1", "judge", "i2", 1, "b", 0, False),
        _grade("q1", "p2", "judge", "i1", 0, "c", 3, False),
        ("q1", "p2", "judge", "i9", 1, None, None, None, None, json.dumps({"why": HOSTILE})),  # an error only
        _grade("q1", "p2", "direct", "", 0, "yes\t!", 4, True),
        _grade("q2", "p3", "judge", "i1", 0, "d", 1, True),
    },
}


def test_bulk_import_stores_the_rows_and_upserts_on_reimport(database: Database, tmp_path: Path) -> None:
    first = _first_file(tmp_path)
    counts = _import(database, first)
    assert counts["grades"] == 6 and counts["rankings"] == 4
    assert _contents(database) == FIRST

    with database.session() as session:
        before = session.execute(select(Collection.revision, Collection.structure_token)).one()
    _import(database, first, batch_size=1)  # the same file again: the same rows, a newer revision
    assert _contents(database) == FIRST
    with database.session() as session:
        after = session.execute(select(Collection.revision, Collection.structure_token)).one()
        assert set(session.scalars(select(Grade.revision).distinct())) == {after.revision}
    assert after.revision > before.revision and after.structure_token != before.structure_token

    overlap = write_jsonl(  # q2 again with a new answer and rank, and a new query
        tmp_path / "second.jsonl",
        [
            ["q2", [_paragraph("p3", [("sysB", 5), ("sysC", 1)], _exam([("i1", "e")], {"i1": 2}, []))]],
            ["q3", [_paragraph("p4", [("sysA", 1)], _exam([("i1", "f")], {"i1": 4}, ["i1"]))]],
        ],
    )
    _import(database, overlap)
    expected = {kind: set(rows) for kind, rows in FIRST.items()}
    expected["passages"].add(("p4", f"text of p4 {HOSTILE}"))
    expected["rankings"] -= {("q2", "p3", "sysB", 1, 99.0, 0)}
    expected["rankings"] |= {("q2", "p3", "sysB", 5, 95.0, 0), ("q2", "p3", "sysC", 1, 99.0, 1)}
    expected["rankings"].add(("q3", "p4", "sysA", 1, 99.0, 0))
    expected["grades"] -= {_grade("q2", "p3", "judge", "i1", 0, "d", 1, True)}
    expected["grades"] |= {
        _grade("q2", "p3", "judge", "i1", 0, "e", 2, False),
        _grade("q3", "p4", "judge", "i1", 0, "f", 4, True),
    }
    assert _contents(database) == expected


BAD_LINE = {  # a third line that fails after two lines' batches have been written
    "bad-field": (
        ["q3", [_paragraph("p4", [("sysA", -1)], _exam([], {}, []))]],
        "paragraphs[0](id=p4).paragraph_data.rankings[0].rank",
    ),
    "duplicate-query": (["q4", [_paragraph("p9", [], _exam([], {}, []))]], "query_id"),
    "nul-in-answer": (["q3", [_paragraph("p4", [], _exam([("i1", "a\x00b")], {}, []))]], "answers[0][1]"),
}


@pytest.mark.parametrize("case", list(BAD_LINE))
def test_an_error_after_written_batches_leaves_the_database_unchanged(
    database: Database, tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _import(database, _first_file(tmp_path))
    monkeypatch.setattr(service, "ANALYZE_AFTER_ROWS", 1)  # PostgreSQL analyses inside the doomed import too
    stored = _contents(database)
    with database.session() as session:
        before = session.execute(select(Collection.revision, Collection.structure_token)).one()
    line, field = BAD_LINE[case]
    records = [
        ["q4", [_paragraph("p5", [("sysD", 1)], _exam([("i1", "new")], {"i1": 1}, []))]],
        ["q2", [_paragraph("p3", [("sysB", 7)], _exam([("i1", "changed")], {"i1": 2}, []))]],
        line,
    ]
    bad = write_jsonl(tmp_path / "bad.jsonl", records)
    with pytest.raises(ImportFormatError) as error:
        _import(database, bad, batch_size=1)
    assert gc.isenabled()  # the import paused the collector and gave it back on the error
    assert (error.value.file, error.value.line) == (str(bad), 3)
    assert error.value.field is not None and error.value.field.endswith(field), error.value.field
    assert _contents(database) == stored
    with database.session() as session:
        assert session.execute(select(Collection.revision, Collection.structure_token)).one() == before


@pytest.mark.parametrize("database", ["postgresql"], indirect=True)
def test_a_batch_the_server_refuses_rolls_the_whole_import_back(database: Database, tmp_path: Path) -> None:
    """The writer thread's failure (here a CHECK constraint added for the test) raises in the importing
    thread, after earlier batches were written and with later lines still to come, and nothing stays."""
    _import(database, _first_file(tmp_path))
    stored = _contents(database)
    with database.engine.begin() as connection:
        connection.execute(text("ALTER TABLE grade ADD CONSTRAINT refuse CHECK (raw_answer <> 'refused') NOT VALID"))
    records = [
        ["q4", [_paragraph(f"p{i}", [("sysD", i + 1)], _exam([("i1", "fine")], {"i1": 1}, [])) for i in range(5, 9)]],
        ["q2", [_paragraph("p3", [("sysB", 7)], _exam([("i1", "refused")], {"i1": 2}, []))]],
        ["q5", [_paragraph(f"p{i}", [("sysE", 1)], _exam([("i1", "late")], {"i1": 3}, [])) for i in range(9, 12)]],
    ]
    with pytest.raises(DBAPIError, match="refuse"):
        _import(database, write_jsonl(tmp_path / "refused.jsonl", records), batch_size=1)
    assert gc.isenabled()
    assert _contents(database) == stored


def test_the_collector_pause_restores_the_state_it_found() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # nested (or a second import in another thread)
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause has not ended
    assert gc.isenabled()
    first = pause()  # overlapping, not nested: the CLI's start-up pause ends during an import
    with collector_paused():
        first()
        first()  # ending a pause twice counts once
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # a caller that disabled it keeps it disabled
    finally:
        gc.enable()


@pytest.mark.parametrize("database", ["postgresql"], indirect=True)
def test_held_jobs_run_after_the_statements_issued_while_held_and_never_after_an_error(database: Database) -> None:
    """SerialWriter.hold: a held job waits for release (or the writer's successful end); a statement in
    between runs first and does not wait for it; an error drops the held jobs unrun."""
    order: list[str] = []
    with database.session() as session:
        with SerialWriter(session) as writer:
            writer.submit(lambda: order.append("started"))
            writer.hold()
            writer.submit(lambda: order.append("held 1"))
            writer.submit(lambda: order.append("held 2"))
            session.execute(text("SELECT 1"))  # waits for the started job only
            order.append("statement")
            writer.release()
            writer.hold()
            writer.submit(lambda: order.append("held at the end"))
        assert order == ["started", "statement", "held 1", "held 2", "held at the end"]

        order.clear()
        with pytest.raises(RuntimeError, match="the caller's"), SerialWriter(session) as writer:
            writer.hold()
            writer.submit(lambda: order.append("never"))
            raise RuntimeError("the caller's error")
        assert order == []
