"""Nugget scores and the importance-weighted Cover: hand-computed cases and a per-response oracle."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from app.errors import Invalid
from app.evaluation.cover import OVERALL, cover_table
from app.evaluation.frame import frames_of
from app.evaluation.nuggets import (
    Importance,
    Importances,
    Subset,
    SupportScale,
    nugget_scores_of,
    nugget_table,
    weighted_cover_table,
)
from app.evaluation.types import GradedPool, RankedPassage, Rankings
from tests.evaluation.test_measures import _dev_qrels_and_runs, grade

GRADED = {
    "q1": {
        "a": grade({"x": 5, "y": 3, "z": 0}),
        "b": grade({"x": 0, "y": 2, "z": 3}),
        "c": grade({"x": 4, "y": 0, "z": 1}),
    },
    "q2": {"d": grade({"u": 3, "v": 1})},
}
RANKINGS = {
    "sysA": {"q1": {"a": RankedPassage(1, 3.0), "b": RankedPassage(2, 2.0)}, "q2": {"d": RankedPassage(1, 1.0)}},
    "sysB": {"q1": {"c": RankedPassage(1, 9.0), "a": RankedPassage(21, 1.0)}},
}
IMPORTANCE = {
    "x": Importance.of("vital"),
    "y": Importance.of("okay"),
    "z": Importance.of("okay"),
    "v": Importance.of("okay"),
}


def table(subset: Subset, strict: bool, importances: Importances = IMPORTANCE, **kw: object) -> dict:
    return nugget_table(*frames_of(GRADED, RANKINGS), importances, subset=subset, strict=strict, **kw)  # type: ignore[arg-type]


class TestHandComputed:
    def test_all_vital_weighted_and_their_strict_forms(self) -> None:
        # sysA q1: x support (5), y partial (3), z partial (3 on b); q2: u partial, v none
        assert table(Subset.ALL, False)["sysA"] == {"q1": pytest.approx(2 / 3), "q2": 0.25}
        assert table(Subset.ALL, True)["sysA"] == {"q1": pytest.approx(1 / 3), "q2": 0.0}
        assert table(Subset.VITAL, False)["sysA"] == {"q1": 1.0, "q2": 0.5}  # u has no importance: vital
        assert table(Subset.VITAL, True)["sysA"] == {"q1": 1.0, "q2": 0.0}
        # weights x 1, y 0.5, z 0.5 → (1 + 0.25 + 0.25) / 2; q2: u 1, v 0.5 → 0.5 / 1.5
        assert table(Subset.WEIGHTED, False)["sysA"] == {"q1": 0.75, "q2": pytest.approx(1 / 3)}
        assert table(Subset.WEIGHTED, True)["sysA"] == {"q1": 0.5, "q2": 0.0}

    def test_rank_beyond_k_is_outside_the_response_and_unanswered_queries_are_absent(self) -> None:
        assert table(Subset.ALL, True)["sysB"] == {"q1": pytest.approx(1 / 3)}  # c: x at 4; a at rank 21
        assert table(Subset.ALL, True, top_k=21)["sysB"] == {"q1": pytest.approx(1 / 3)}
        assert table(Subset.ALL, False, top_k=21)["sysB"] == {"q1": 0.5}  # + y partial on a

    def test_the_scale_is_configurable(self) -> None:
        assert table(Subset.ALL, True, scale=SupportScale(5, 5))["sysA"] == {"q1": pytest.approx(1 / 3), "q2": 0.0}
        assert table(Subset.ALL, True, scale=SupportScale(3, 3))["sysA"] == {"q1": 1.0, "q2": 0.5}
        assert table(Subset.ALL, False, scale=SupportScale(2, 1))["sysA"] == {"q1": 1.0, "q2": 0.75}

    def test_without_importance_vital_and_weighted_equal_all(self) -> None:
        for strict in (False, True):
            plain = table(Subset.ALL, strict, {})
            assert table(Subset.VITAL, strict, {}) == plain
            assert table(Subset.WEIGHTED, strict, {}) == plain

    def test_system_score_is_the_mean_over_answered_queries(self) -> None:
        scores = {s.system: s for s in nugget_scores_of(table(Subset.ALL, False))}
        assert scores["sysA"].score == pytest.approx((2 / 3 + 0.25) / 2)
        assert scores["sysB"].per_query == {"q1": pytest.approx(1 / 3)}

    def test_weighted_cover(self) -> None:
        frames = frames_of(GRADED, RANKINGS)
        weighted = weighted_cover_table(*frames, IMPORTANCE, min_rating=3)
        # sysA q1 covers x, y, z at τ=3 → 2/2; q2 covers u (1 of 1.5)
        assert weighted["sysA"] == ({"q1": 1.0, "q2": pytest.approx(1 / 1.5)}, {"q1": 1.0, "q2": 1.0})
        # sysB q1: c covers x (weight 1 of 2)
        assert weighted["sysB"] == ({"q1": 0.5}, {"q1": 0.5})
        assert weighted[OVERALL][0] == {"q1": 1.0, "q2": pytest.approx(1 / 1.5)}

    def test_bad_scales_and_importances_are_refused(self) -> None:
        with pytest.raises(Invalid, match="partial ≤ support"):
            SupportScale(3, 4)
        with pytest.raises(Invalid, match="support ≤ 5"):
            SupportScale(6, 3)
        with pytest.raises(Invalid, match="importance"):
            Importance.of("essential")
        with pytest.raises(Invalid, match="weight"):
            Importance.of("vital", float("nan"))
        assert Importance.of(None) == Importance(True, 1.0)
        assert Importance.of("okay") == Importance(False, 0.5)
        assert Importance.of("okay", 2.0) == Importance(False, 2.0)


def reference_nuggets(
    graded: GradedPool,
    rankings: Rankings,
    importances: Importances,
    subset: Subset,
    strict: bool,
    scale: SupportScale,
    top_k: int,
) -> dict[str, dict[str, float]]:
    """The module docstring written out response by response, nugget by nugget: the oracle."""
    result: dict[str, dict[str, float]] = {system: {} for system in rankings}
    for query_id, pool in graded.items():
        nuggets = sorted(set().union(*(g.item_ids for g in pool.values())))
        for system, by_query in rankings.items():
            response = [p for p, r in by_query.get(query_id, {}).items() if p in pool and r.rank <= top_k]
            if not response:
                continue
            numerator = denominator = 0.0
            for nugget in nuggets:
                importance = importances.get(nugget, Importance())
                value = {Subset.ALL: 1.0, Subset.VITAL: float(importance.vital), Subset.WEIGHTED: importance.weight}
                assignment = max(scale.credit_of(pool[p].ratings.get(nugget)) for p in response)
                if strict and assignment < 1.0:
                    assignment = 0.0
                numerator += value[subset] * assignment
                denominator += value[subset]
            result[system][query_id] = numerator / denominator if denominator > 0 else 0.0
    return result


@pytest.fixture(scope="module")
def dev(dl19_dev: Path) -> tuple[dict, dict, dict[str, Importance]]:
    graded, rankings = _dev_qrels_and_runs(dl19_dev)
    rng = random.Random(14)
    items = sorted({i for docs in graded.values() for g in docs.values() for i in g.item_ids})
    choices = [Importance.of("vital"), Importance.of("okay"), Importance.of(None), Importance.of("okay", 2.0)]
    return graded, rankings, {i: rng.choice(choices) for i in items}


@pytest.mark.parametrize(
    ("subset", "strict", "scale", "top_k"),
    [
        (Subset.ALL, False, SupportScale(), 20),
        (Subset.VITAL, True, SupportScale(), 20),
        (Subset.WEIGHTED, False, SupportScale(5, 2), 10),
        (Subset.WEIGHTED, True, SupportScale(), 20),
    ],
)
def test_nugget_table_equals_the_response_by_response_definition_on_dev_data(
    dev: tuple[dict, dict, dict[str, Importance]], subset: Subset, strict: bool, scale: SupportScale, top_k: int
) -> None:
    graded, rankings, importances = dev
    got = nugget_table(
        *frames_of(graded, rankings), importances, subset=subset, strict=strict, scale=scale, top_k=top_k
    )
    expected = reference_nuggets(graded, rankings, importances, subset, strict, scale, top_k)
    assert got.keys() == expected.keys()
    for system, by_query in expected.items():
        assert got[system] == pytest.approx(by_query, rel=1e-12, abs=1e-15)
        assert got[system].keys() == by_query.keys()


def test_weighted_cover_with_unit_weights_is_cover_exactly_and_weights_match_the_oracle(
    dev: tuple[dict, dict, dict[str, Importance]],
) -> None:
    graded, rankings, importances = dev
    frames = frames_of(graded, rankings)
    assert weighted_cover_table(*frames, {}, min_rating=4) == cover_table(*frames, min_rating=4)
    weighted = weighted_cover_table(*frames, importances, min_rating=4)
    for system, by_query in rankings.items():
        for query_id in weighted[system][0]:
            pool = graded[query_id]
            top = [p for p, r in by_query[query_id].items() if p in pool and r.rank <= 20]
            union = {i for p in top for i, r in pool[p].ratings.items() if r >= 4}
            seen = set().union(*(g.item_ids for g in pool.values()))
            w = sum(importances[i].weight for i in union) / sum(importances[i].weight for i in seen)
            assert weighted[system][0][query_id] == pytest.approx(w, rel=1e-12)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("nugget-vital", "nugget-vital"),
        ("Nugget-Strict-All", "nugget-strict-all"),
        ("nugget-weighted(support=5,partial=2)", "nugget-weighted(support=5,partial=2)"),
        ("nugget-all(support=4,partial=3)", "nugget-all"),
        ("cover-weighted", "cover-weighted"),
        ("n-cover-weighted", "n-cover-weighted"),
    ],
)
def test_measure_names_parse_to_values_whose_name_parses_back(text: str, name: str) -> None:
    from app.leaderboards import measures

    measure = measures.parse(text)
    assert measure.name == name
    assert measures.parse(measure.name) == measure


@pytest.mark.parametrize(
    "text", ["nugget-vital(support=2,partial=3)", "nugget-all(support=6,partial=1)", "nugget-okay"]
)
def test_bad_nugget_measures_are_refused_at_the_boundary(text: str) -> None:
    from app.leaderboards import measures

    with pytest.raises(Invalid):
        measures.parse(text)
