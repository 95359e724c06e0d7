"""The in-memory evaluation snapshot: every write that can change a leaderboard reaches it.

Each test compares the leaderboard recomputed on a warm snapshot with one computed from a cleared
snapshot (everything read from the database again) and with the expected numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app.collections import snapshot
from app.collections.revision import collection_of_entries, next_revision, upsert_grades
from app.collections.service import ensure_collection, get_collection, import_interchange, import_run
from app.leaderboards.service import LeaderboardRequest, compute_leaderboard, leaderboard_json
from app.models import Collection, Grade, GradeOverride, PoolEntry
from tests.conftest import Database
from tests.helpers import write_jsonl

ITEMS = ["q1/a", "q1/b", "q1/c"]


def _paragraph(pid: str, ratings: list[int], ranks: dict[str, int]) -> dict[str, Any]:
    return {
        "paragraph_id": pid,
        "text": f"text of {pid}",
        "paragraph_data": {
            "judgments": [],
            "rankings": [
                {"method": s, "paragraphId": pid, "queryId": "q1", "rank": r, "score": 10.0 - r}
                for s, r in ranks.items()
            ],
        },
        "exam_grades": [
            {
                "correctAnswered": [i for i, r in zip(ITEMS, ratings, strict=True) if r > 0],
                "wrongAnswered": [i for i, r in zip(ITEMS, ratings, strict=True) if r == 0],
                "answers": [[i, str(r)] for i, r in zip(ITEMS, ratings, strict=True)],
                "llm": "test-llm",
                "llm_options": {},
                "exam_ratio": 0.0,
                "prompt_info": {"prompt_class": "QuestionSelfRatedUnanswerablePromptWithChoices"},
                "self_ratings": [{"question_id": i, "self_rating": r} for i, r in zip(ITEMS, ratings, strict=True)],
            }
        ],
    }


def _collection_file(tmp_path: Path, p2_ratings: list[int] | None = None) -> Path:
    return write_jsonl(
        tmp_path / "graded.jsonl",
        [
            [
                "q1",
                [
                    _paragraph("p1", [5, 0, 0], {"good": 1, "bad": 2}),
                    _paragraph("p2", p2_ratings or [0, 4, 0], {"good": 2, "bad": 1}),
                    _paragraph("p3", [0, 0, 1], {"bad": 3}),
                ],
            ]
        ],
    )


def _scores(database: Database, measure: str = "cover", **options: Any) -> dict[str, Any]:
    with database.session() as session:
        request = LeaderboardRequest(measure=measure, min_rating=3, top_k=1, bootstrap_samples=0, **options)
        board = leaderboard_json(compute_leaderboard(session, get_collection(session, "c"), request))
        session.commit()
    return {s["system"]: s["score"] for s in board["systems"]}


def _warm_equals_cold(database: Database, measure: str = "cover", **options: Any) -> dict[str, Any]:
    warm = _scores(database, measure, **options)
    snapshot.clear()
    assert _scores(database, measure, **options) == warm
    return warm


@pytest.fixture
def collection(database: Database, tmp_path: Path) -> Database:
    with database.session() as session:
        import_interchange(session, ensure_collection(session, "c"), _collection_file(tmp_path))
        session.commit()
    return database


def _cells(database: Database) -> list[Grade]:
    with database.session() as session:
        return list(session.scalars(select(Grade).order_by(Grade.id)))


def test_a_graded_batch_reaches_the_warm_snapshot(collection: Database) -> None:
    # top-1 Cover at τ=3: good ranks p1 first (covers a), bad ranks p2 first (covers b); 3 items seen
    assert _scores(collection) == {"_overall_": pytest.approx(2 / 3), "good": 1 / 3, "bad": 1 / 3}
    before = snapshot.current(collection.session(), _collection(collection))
    p2_b = next(g for g in _cells(collection) if g.item_id == "q1/b" and g.self_rating == 4)
    p3_c = next(g for g in _cells(collection) if g.item_id == "q1/c" and g.self_rating == 1)
    with collection.session() as session:
        rows = [
            {"grader_pk": p2_b.grader_pk, "pool_entry_pk": p2_b.pool_entry_pk, "item_id": "q1/b", "self_rating": 1},
            {"grader_pk": p3_c.grader_pk, "pool_entry_pk": p3_c.pool_entry_pk, "item_id": "q1/c", "self_rating": 5},
        ]
        upsert_grades(session, rows, update=["self_rating"])
        session.commit()
    assert _scores(collection) == {"_overall_": pytest.approx(2 / 3), "good": 1 / 3, "bad": 0.0}
    assert snapshot.current(collection.session(), _collection(collection)) is before  # applied, not rebuilt
    assert _warm_equals_cold(collection) == {"_overall_": pytest.approx(2 / 3), "good": 1 / 3, "bad": 0.0}


def _collection(database: Database) -> Collection:
    with database.session() as session:
        return get_collection(session, "c")


def test_every_grade_write_takes_a_new_revision_of_its_collection(collection: Database, tmp_path: Path) -> None:
    with collection.session() as session:
        imported = _collection(collection).revision
        revisions = set(session.scalars(select(Grade.revision)))
        assert revisions == {imported}  # one import, one revision
        other = ensure_collection(session, "other")
        import_interchange(session, other, _collection_file(tmp_path))
        other_id = other.id
        for _ in range(3):  # so the two collections' revisions differ
            next_revision(session, other_id)
        entries = session.execute(select(PoolEntry.id).order_by(PoolEntry.id)).scalars().all()
        grader = session.scalars(select(Grade.grader_pk)).first()
        upsert_grades(
            session,
            [{"grader_pk": grader, "pool_entry_pk": e, "item_id": "q1/a", "self_rating": 2} for e in entries],
            update=["self_rating"],
        )
        session.commit()
        revision_of = dict(session.execute(select(Collection.id, Collection.revision)).all())
        stamped = session.execute(select(Grade.pool_entry_pk, Grade.collection_id, Grade.revision)).all()
        owner = collection_of_entries(session, entries)
    assert revision_of[_collection(collection).id] == imported + 1
    assert set(owner.values()) == {_collection(collection).id, other_id}
    assert revision_of[other_id] != revision_of[_collection(collection).id]
    # every row carries its own collection and that collection's revision
    assert all(collection_id == owner[entry] for entry, collection_id, _ in stamped)
    written = [(entry, revision) for entry, _, revision in stamped if revision > imported]
    assert len(written) == len(entries)
    assert all(revision == revision_of[owner[entry]] for entry, revision in written)


def test_re_importing_changed_grades_and_adding_a_run_reach_the_snapshot(collection: Database, tmp_path: Path) -> None:
    _scores(collection)
    changed = tmp_path / "changed"
    changed.mkdir()
    with collection.session() as session:
        target = get_collection(session, "c")
        import_interchange(session, target, _collection_file(changed, p2_ratings=[0, 0, 0]))
        run = changed / "late.run"
        run.write_text("q1 Q0 p3 1 9.0 late\n")
        import_run(session, target, run)
        session.commit()
    assert _warm_equals_cold(collection) == {
        "_overall_": pytest.approx(1 / 3),
        "good": 1 / 3,
        "bad": 0.0,
        "late": 0.0,
    }


def test_overrides_and_rubric_versions_apply_on_the_warm_snapshot(collection: Database) -> None:
    _scores(collection)
    p2_b = next(g for g in _cells(collection) if g.item_id == "q1/b" and g.self_rating == 4)
    with collection.session() as session:
        session.add(GradeOverride(pool_entry_pk=p2_b.pool_entry_pk, item_id="q1/b", rating=0, judge="ann"))
        session.commit()
    assert _scores(collection)["bad"] == 1 / 3  # overrides are opt-in
    assert _warm_equals_cold(collection, include_overrides=True)["bad"] == 0.0


def test_trec_measures_on_the_warm_snapshot(collection: Database) -> None:
    scores = _warm_equals_cold(collection, measure="P@1")
    assert scores == {"good": 1.0, "bad": 1.0}  # both top passages have a rating ≥ 3
