"""The evaluation pages' per-process caches (issue 16: every page under 300 ms at 5× DL) answer what a
fresh computation answers after each kind of write, on both databases: a grading batch (moves the
revision), a judge's override and a rubric edit (move none), and a re-import of judgments (moves none).

Kept: the agreement analysis (app/agreement/analysis.py), the verify view's order and one query's
question impact (app/oversight/service.py), a judge's uniform review order (app/review/queue.py), and
the leaderboard's Cover table, trec values, manual judgments and per-query correlation
(app/leaderboards/service.py, app/collections/snapshot.py:manual_judgments).
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.agreement import analysis as agreement
from app.collections import queries, snapshot
from app.collections.graders import resolve_grader
from app.collections.revision import upsert_grades
from app.collections.service import CollectionWriter, get_collection
from app.db import session_scope
from app.leaderboards import service as leaderboards
from app.leaderboards.analysis import leaderboard_analysis, leaderboard_analysis_json
from app.leaderboards.service import LeaderboardRequest
from app.models import Grade, Judgment, PoolEntry, Query
from app.oversight import service as oversight
from app.review import overrides, queue
from app.rubrics.editing import ItemChange, apply_edit
from app.rubrics.service import latest_version
from tests.conftest import Database


def _views(session: Session) -> dict[str, str]:
    """Each cached page's data as JSON text (NaN κ compares equal as text)."""
    collection = get_collection(session, "dl19")
    grader = resolve_grader(session, collection)
    query = oversight.query_choices(session, collection)[0]
    views: dict[str, Any] = {
        "agreement": agreement.agreement_analysis_json(
            agreement.agreement_analysis(session, collection, grader_id=grader.id, min_answers=(1,), min_judgment=2)
        ),
        "verify": oversight.oversight_page(session, collection, "verify", grader, page=3).as_json(),
        "impact": oversight.oversight_page(
            session, collection, "impact", grader, filters=oversight.RowFilter(query)
        ).as_json(),
        "queue": queue.next_cells(
            session, collection, queue.QueueRequest(judge="judge", mode="uniform", grader_id=grader.id), limit=5
        ).as_json(),
    }
    for measure in ("P@20", "cover"):  # with overrides, as a judge's board shows them; P@20 with its per-query τ
        request = LeaderboardRequest(measure, min_rating=3, include_overrides=True, bootstrap_samples=0)
        board = leaderboard_analysis(session, collection, request, per_query_level=2)
        views[f"leaderboard {measure}"] = leaderboard_analysis_json(board)
    return {name: json.dumps(value, sort_keys=True, default=str) for name, value in views.items()}


def _fresh() -> dict[str, str]:
    agreement.clear()
    oversight.clear()
    queue.clear()
    leaderboards.clear()
    snapshot.clear()
    with session_scope() as session:
        return _views(session)


def _first_query_cells(session: Session) -> list[Grade]:
    collection = get_collection(session, "dl19")
    grader = resolve_grader(session, collection)
    first = oversight.query_choices(session, collection)[0]
    return list(
        session.scalars(
            select(Grade)
            .join(PoolEntry, PoolEntry.id == Grade.pool_entry_pk)
            .join(Query, Query.id == PoolEntry.query_pk)
            .where(Query.query_id == first, Query.collection_id == collection.id, Grade.grader_pk == grader.id)
            .where(Grade.self_rating.is_not(None))
            .order_by(Grade.id)
        )
    )


def _grading_batch(session: Session) -> None:
    """A worker's batch: the first query's self-ratings turned around (r → 5 − r)."""
    rows = [
        {"grader_pk": g.grader_pk, "pool_entry_pk": g.pool_entry_pk, "item_id": g.item_id, "self_rating": 5 - r}
        for g in _first_query_cells(session)
        if (r := g.self_rating) is not None
    ]
    upsert_grades(session, rows, update=["self_rating"])


def _override(session: Session) -> None:
    """The judge overrides the first cell of their own uniform queue."""
    collection = get_collection(session, "dl19")
    grader = resolve_grader(session, collection)
    request = queue.QueueRequest(judge="judge", mode="uniform", grader_id=grader.id)
    cell = queue.next_cells(session, collection, request).cells[0]
    overrides.record(
        session, collection, cell.pool_entry, cell.item_id, action="set", judge="judge", rating=5, grader_pk=grader.id
    )


def _rubric_edit(session: Session) -> None:
    """A judge deletes the first query's first item from the rubric (a new version, no revision)."""
    collection = get_collection(session, "dl19")
    first = oversight.query_choices(session, collection)[0]
    item = queries.load_bank(session, latest_version(session, collection))[first][0]
    change = ItemChange("delete", first, item_id=item.item_id, expected_text=item.text)
    apply_edit(session, collection, [change], user="judge")


def _judgments(session: Session) -> None:
    """A re-import of judgments onto pool entries already judged: 200 of them flipped (0 ↔ 3)."""
    collection = get_collection(session, "dl19")
    rows = session.execute(
        select(Judgment.pool_entry_pk, Judgment.relevance)
        .join(PoolEntry, PoolEntry.id == Judgment.pool_entry_pk)
        .join(Query, Query.id == PoolEntry.query_pk)
        .where(Query.collection_id == collection.id, Judgment.ordinal == 0)
        .order_by(Judgment.pool_entry_pk)
    ).all()
    CollectionWriter(session, collection).replace_judgments(
        {entry: [(0 if relevance >= 2 else 3, None)] for entry, relevance in rows[:400:2]}
    )


def test_cached_pages_equal_a_fresh_computation_after_every_kind_of_write(dev_database: Database) -> None:
    before = _fresh()
    with session_scope() as session:
        assert _views(session) == before  # served from the caches
    moved = {
        _grading_batch: {"agreement", "verify", "impact", "leaderboard P@20", "leaderboard cover"},
        _override: {"agreement", "queue"},  # override agreement; the cell leaves the queue
        _rubric_edit: {"agreement", "verify", "impact"},
        _judgments: {"agreement", "leaderboard P@20"},  # the per-query correlation with the manual judgments
    }
    for write, changed in moved.items():
        with session_scope() as session:
            write(session)
        with session_scope() as session:
            cached = _views(session)
        after = _fresh()
        assert cached == after, write.__name__
        assert {name for name in after if after[name] != before[name]} >= changed, write.__name__
        before = after
