"""The review queue's order on hand-made cases: priority (effect × uncertainty) and the uniform row sample."""

from __future__ import annotations

import numpy as np
import pytest

from app.evaluation.frame import GradeFrame, RankingFrame, frames_of
from app.evaluation.types import PassageGrade, RankedPassage
from app.review.queue import pair_weights, priority_order, priority_scores, uniform_order


def _grade(ratings: dict[str, int]) -> PassageGrade:
    return PassageGrade(ratings, frozenset(i for i, r in ratings.items() if r > 0), frozenset(ratings), True)


def _case() -> tuple[GradeFrame, RankingFrame]:
    """One query q, items A and B, passages p0..p2; three systems, each with a different passage first.

    Ratings (t = 4 covers): p0 = {A: 4, B: 1}, p1 = {A: 3, B: 4}, p2 = {A: 0, B: 0}.
    Cells in frame order: p0A, p0B, p1A, p1B, p2A, p2B.
    """
    graded = {"q": {"p0": _grade({"A": 4, "B": 1}), "p1": _grade({"A": 3, "B": 4}), "p2": _grade({"A": 0, "B": 0})}}
    first = {"S0": "p0", "S1": "p1", "S2": "p2"}
    rankings = {
        system: {
            "q": {p: RankedPassage(1 if p == top else 2 + n, 1.0 / (n + 1)) for n, p in enumerate(["p0", "p1", "p2"])}
        }
        for system, top in first.items()
    }
    return frames_of(graded, rankings)


def test_priority_order_on_a_hand_made_case() -> None:
    grades, rankings = _case()
    assert [(grades.pool.passage_ids[e], grades.items[i]) for e, i in zip(grades.entry, grades.item, strict=True)] == [
        ("p0", "A"), ("p0", "B"), ("p1", "A"), ("p1", "B"), ("p2", "A"), ("p2", "B"),
    ]  # fmt: skip
    expected = np.full(6, np.nan)
    expected[2] = 3.4  # p1A: E[grade] stored, 0.1 from the threshold's middle 3.5
    mass = np.full(6, np.nan)
    mass[0] = 0.5  # p0A: half the probability fell on invalid tokens
    judged = np.array([0, -1, 3])  # p0 judged non-relevant, p1 unjudged, p2 judged relevant
    scores = priority_scores(grades, rankings, min_rating=4, top_k=1, expected=expected, valid_mass=mass, judged=judged)
    # Cover at top 1 (|Q_q| = 2): S0 = |{A}|/2 = 0.5, S1 = |{B}|/2 = 0.5, S2 = 0. One query, so every
    # stderr is 0: the pair (S0, S1) is tied (w = 1), (S1, S2) is 0.5 apart (w = 0, dropped).
    # Pivotal (top 1): S0 for p0A (the only cover of A) and p0B (B uncovered); S1 for p1A, p1B; S2 for p2A, p2B.
    # Reach = 1 everywhere. [P_S0 ≠ P_S1]: 1 for p0*, p1*; 0 for p2*.
    # L = 1/(N·|Q_q|)·(close + 0.1·reach/3) = 0.5·(1 + 1/30) = 0.516667 for p0*, p1*; 0.5·(1/30) for p2*.
    assert scores.reach.tolist() == [1, 1, 1, 1, 1, 1]
    assert scores.effect == pytest.approx([0.5 * (1 + 0.1 / 3)] * 4 + [0.5 * 0.1 / 3] * 2)
    # near = clip(1 − |g − 3.5| / 2.5): p0A 4 → 0.8, p0B 1 → 0, p1A E 3.4 → 0.96, p1B 4 → 0.8, p2* 0 → 0.
    assert scores.near == pytest.approx([0.8, 0.0, 0.96, 0.8, 0.0, 0.0])
    # disagree: p0A covered but judged non-relevant; p2* judged relevant but p2 covers nothing.
    assert scores.disagree.tolist() == [True, False, False, False, True, True]
    # U = 1 − (1 − near)(1 − low_mass)(1 − ½·disagree):
    #   p0A 1 − 0.2·0.5·0.5 = 0.95, p0B 0, p1A 0.96, p1B 0.8, p2A = p2B = 1 − 1·1·0.5 = 0.5
    assert scores.uncertainty == pytest.approx([0.95, 0.0, 0.96, 0.8, 0.5, 0.5])
    # priority = L·U: p1A 0.4960 > p0A 0.4908 > p1B 0.4133 > p2A = p2B 0.0083 (tie: item id) > p0B 0
    order = priority_order(grades, scores)
    assert order.tolist() == [2, 0, 3, 4, 5, 1]


def test_close_pairs_weigh_by_their_gap_in_stderrs() -> None:
    # sorted: s0 (0.5), s1 (0.45), s2 (0.1); (s0, s1): δ = 0.05, σ = √(0.1² + 0.1²) = 0.1414 → w = 0.6464;
    # (s1, s2): δ = 0.35 > σ = √(0.1² + 0.05²) = 0.1118 → w = 0, left out.
    pairs = pair_weights([(0.5, 0.1), (0.45, 0.1), (0.1, 0.05)])
    assert [(a, b) for a, b, _ in pairs] == [(0, 1)]
    assert pairs[0][2] == pytest.approx(1 - 0.05 / np.hypot(0.1, 0.1))


def test_uniform_order_is_a_seeded_permutation_independent_of_load_order() -> None:
    grades, _ = _case()
    order = uniform_order(grades, 7)
    assert sorted(order.tolist()) == list(range(6))  # every cell once, none repeated
    assert uniform_order(grades, 7).tolist() == order.tolist()  # same seed, same sequence
    assert any(uniform_order(grades, s).tolist() != order.tolist() for s in range(1, 6))
    # the same cells loaded in another order: the same cells come out in the same sequence
    reverse = np.arange(5, -1, -1)
    shuffled = GradeFrame(
        grades.pool,
        grades.items,
        grades.entry[reverse],
        grades.item[reverse],
        grades.rating[reverse],
        grades.correct[reverse],
    )
    cells = [(int(grades.entry[c]), int(grades.item[c])) for c in order]
    again = [(int(shuffled.entry[c]), int(shuffled.item[c])) for c in uniform_order(shuffled, 7)]
    assert again == cells


def test_uniform_order_presents_whole_rows_stable_under_regrades_and_new_rows() -> None:
    grades, _ = _case()
    seeds = range(40)
    for seed in seeds:
        rows = [int(grades.entry[c]) for c in uniform_order(grades, seed)]
        assert rows == [r for r in dict.fromkeys(rows) for _ in range(2)]  # each row's 2 items together
        items = [grades.items[int(grades.item[c])] for c in uniform_order(grades, seed)]
        assert items == ["A", "B"] * 3  # within a row, by item id
    # every order of the 3 rows occurs over 40 seeds (6 orders, each with chance 1/6)
    firsts = {tuple(dict.fromkeys(int(grades.entry[c]) for c in uniform_order(grades, s))) for s in seeds}
    assert len(firsts) == 6
    # a rubric edit (item B dropped) and a bigger pool (a new row p3) keep the other rows' order
    order = [grades.pool.passage_ids[int(grades.entry[c])] for c in uniform_order(grades, 11)][::2]
    edited = grades.select(grades.item == grades.items.index("A"))
    assert [edited.pool.passage_ids[int(edited.entry[c])] for c in uniform_order(edited, 11)] == order
    graded = {"q": {p: _grade({"A": 1, "B": 2}) for p in ("p0", "p1", "p2", "p3")}}
    bigger, _ = frames_of(graded, {})
    rows = [bigger.pool.passage_ids[int(bigger.entry[c])] for c in uniform_order(bigger, 11)][::2]
    assert [p for p in rows if p != "p3"] == order
