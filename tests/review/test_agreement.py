"""Judge-judge κ and judge-vs-grader trends on hand-made logs; progress counts."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.review.agreement import grader_trend, judge_pairs
from app.review.progress import Action, summarise

DAY1 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
DAY2 = datetime(2026, 11, 3, 9, 0, tzinfo=UTC)


def _act(judge: str, cell: int, rating: int | None, shown: int | None = None, at: datetime = DAY1) -> Action:
    action = "clear" if rating is None else ("accept" if rating == shown else "set")
    return Action(judge, (cell, "A"), "q1" if cell < 3 else "q2", action, rating, shown, "queue", at)


def test_judge_pair_kappa_on_a_hand_made_case() -> None:
    log = [
        _act("ann", 1, 0),  # superseded by ann's later 5 on cell 1
        _act("ann", 1, 5),
        _act("bob", 1, 4),  # both ≥ 4
        _act("ann", 2, 2),
        _act("bob", 2, 2),  # both < 4, equal
        _act("ann", 3, 4),
        _act("bob", 3, 1),  # ann ≥ 4, bob not
        _act("ann", 4, 0),
        _act("bob", 4, 0),  # both < 4, equal
        _act("ann", 5, 3),
        _act("bob", 5, 3),
        _act("bob", 5, None),  # bob withdrew cell 5: not a common cell
        _act("carol", 9, 5),  # carol shares no cell: no pair with her
    ]
    (pair,) = judge_pairs(log, threshold=4)
    assert (pair.first, pair.second) == ("ann", "bob")
    # ann as "predicted", bob as "relevant": TP = 1 (cell 1), FP = 1 (cell 3), FN = 0, TN = 2 (cells 2, 4).
    # p_o = 3/4; p_e = (2/4)(1/4) + (2/4)(3/4) = 0.5; κ = (0.75 − 0.5) / 0.5 = 0.5. Equal ratings: cells 2, 4.
    assert (pair.agreement.confusion.tp, pair.agreement.confusion.fp) == (1, 1)
    assert (pair.agreement.confusion.fn, pair.agreement.confusion.tn) == (0, 2)
    assert pair.agreement.n == 4
    assert pair.agreement.kappa == pytest.approx(0.5)
    assert pair.agreement.exact == pytest.approx(0.5)


def test_judge_against_grader_per_day() -> None:
    log = [
        _act("ann", 1, 5, shown=5),  # accept: agrees
        _act("ann", 2, 1, shown=4),  # changed across the threshold
        _act("ann", 3, 4, shown=4, at=DAY2),
        _act("ann", 4, None, shown=3, at=DAY2),  # a clear is no rating
    ]
    granularity, trend = grader_trend(log, threshold=4)
    assert granularity == "day"
    assert [(t.judge, t.period, t.agreement.n) for t in trend] == [("ann", "2026-11-02", 2), ("ann", "2026-11-03", 1)]
    assert trend[0].agreement.exact == pytest.approx(0.5)


def test_progress_per_judge_and_query() -> None:
    log = [
        _act("ann", 1, 5, shown=5),
        _act("ann", 2, 1, shown=4),
        _act("bob", 2, 1, shown=4),
        _act("bob", 3, 3, shown=3),
        _act("bob", 4, 2, shown=2),
        _act("bob", 4, None, shown=2),  # withdrawn
    ]
    summary = summarise(log, {"q1": 10, "q2": 5})
    ann, bob = summary.judges
    assert (ann.judge, ann.reviewed, ann.accepted, ann.changed) == ("ann", 2, 1, 1)
    assert (bob.judge, bob.reviewed, bob.accepted, bob.changed) == ("bob", 2, 1, 1)
    assert [(q.query_id, q.reviewed, q.in_queue) for q in summary.queries] == [("q1", 2, 10), ("q2", 1, 5)]
    assert (summary.reviewed, summary.in_queue) == (3, 15)
