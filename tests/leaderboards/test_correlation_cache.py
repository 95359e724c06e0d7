"""Per-query correlation: the numpy τ_AP equals the literal loop, and a kept correlation equals a fresh one.

The leaderboard fragment correlates every query (270 at issue 16's 5×) on every request; it keeps
the result per structure, measure and levels, and reuses it only when the judgments (named by the
collection's judgments token) and the derived values it was computed from are today's. A re-import
of judgments moves neither the revision nor the structure token, only the judgments token: these
tests write judgments through the importer's writer, as a re-import does.
"""

from __future__ import annotations

import random

import pytest
from sqlalchemy import select

from app.collections import queries, snapshot
from app.collections.revision import upsert_grades
from app.collections.service import CollectionWriter, get_collection
from app.db import session_scope
from app.evaluation.correlation import _tau_ap_ordered, _tau_ap_ordered_loop, tau_ap
from app.leaderboards import service as leaderboards
from app.leaderboards.service import LeaderboardRequest, PerQueryCorrelation, evaluation_data
from app.models import Grade, Judgment
from tests.conftest import Database


@pytest.mark.parametrize("seed", range(40))
def test_numpy_tau_ap_equals_the_loop_bit_for_bit(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(2, 70)
    official = [float(rng.randint(1, max(2, n // 3))) + rng.choice((0.0, 0.5)) for _ in range(n)]  # many ties
    predicted = [float(rng.randint(1, max(2, n // 2))) for _ in range(n)]
    order = sorted(range(n), key=lambda i: (predicted[i], official[i], i))
    assert _tau_ap_ordered(official, order) == _tau_ap_ordered_loop(official, order)
    assert -1.0 <= tau_ap(official, predicted) <= 1.0


REQUEST = LeaderboardRequest("P@20", min_rating=4)


def _correlation() -> PerQueryCorrelation:
    with session_scope() as session:
        collection = get_collection(session, "dl19")
        data = evaluation_data(session, collection, REQUEST)
        return leaderboards.manual_per_query_correlation(session, collection, data, REQUEST, min_judgment=2)


def _fresh() -> PerQueryCorrelation:
    leaderboards.clear()
    return _correlation()


def test_kept_correlation_follows_judgments_and_grades(dev_database: Database) -> None:
    first = _correlation()
    assert _correlation() is first  # nothing changed: the kept result
    with dev_database.session() as session:  # a judgment re-import: no new revision, no new structure token
        rows = session.execute(select(Judgment.pool_entry_pk, Judgment.ordinal, Judgment.relevance)).all()
        by_entry: dict[int, list[tuple[int, str | None]]] = {}
        for entry, _, relevance in sorted(rows):
            by_entry.setdefault(entry, []).append((3 - relevance, None))
        CollectionWriter(session, get_collection(session, "dl19")).replace_judgments(by_entry)
        session.commit()
    after_judgments = _correlation()
    assert after_judgments is not first
    assert after_judgments == _fresh() != first
    with session_scope() as session:  # the kept judgments are what a read from the database answers
        collection = get_collection(session, "dl19")
        kept = snapshot.manual_judgments(session, collection)
        assert kept.by_query == queries.load_judgments(session, queries.pool_keys(session, collection))
        judged, worst, best = snapshot.judgment_extremes(session, collection)
        assert int(judged.sum()) == len(by_entry) and int(best.max()) == max(3 - r for _, _, r in rows)
    with dev_database.session() as session:  # a grading batch: new revision, new derived values
        cells = session.execute(select(Grade.grader_pk, Grade.pool_entry_pk, Grade.item_id).order_by(Grade.id)).all()
        rows = [
            {"grader_pk": g, "pool_entry_pk": e, "item_id": i, "self_rating": 5, "correct": True}
            for g, e, i in cells[::7]
        ]
        upsert_grades(session, rows, update=["self_rating", "correct"])
        session.commit()
    warm = _correlation()
    assert warm is not after_judgments
    assert warm == _fresh() != after_judgments
