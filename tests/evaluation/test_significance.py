"""Paired significance tests: the randomisation test against scipy's permutation_test, the t-test against
scipy's ttest_rel, Holm on a textbook example, and the groups of systems that cannot be told apart."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from app.evaluation.significance import (
    adjacent_significance,
    all_pairs_significance,
    holm,
    min_holm_p,
    paired_t,
    randomisation_test,
)

A = [0.50, 0.60, 0.70, 0.20, 0.90, 0.40, 0.30, 0.80]
B = [0.40, 0.65, 0.50, 0.10, 0.70, 0.45, 0.20, 0.60]


def _scipy_p(a: list[float] | np.ndarray, b: list[float] | np.ndarray, **options: object) -> float:
    def mean_difference(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
        return np.mean(x - y, axis=axis)

    result = stats.permutation_test(
        (a, b),
        mean_difference,
        permutation_type="samples",
        vectorized=True,
        **options,  # type: ignore[arg-type]
    )
    return float(result.pvalue)


def test_exact_randomisation_equals_scipy_permutation_test() -> None:
    # 2^8 = 256 sign vectors ≤ the trials: both enumerate them all, so the p-values are equal exactly
    assert randomisation_test(A, B) == _scipy_p(A, B, n_resamples=10_000)
    assert randomisation_test(A, A) == 1.0 == _scipy_p(A, A, n_resamples=10_000)


def test_sampled_randomisation_is_seeded_and_agrees_with_scipy() -> None:
    rng = np.random.default_rng(1)
    a = rng.random(43)
    b = a - 0.05 + rng.normal(0, 0.2, 43)
    p = randomisation_test(a, b, trials=10_000, seed=42)
    assert p == randomisation_test(a, b, trials=10_000, seed=42)  # the same seed, the same p
    assert p == pytest.approx(0.0055994, abs=1e-7)  # pinned: numpy default_rng(42)
    assert abs(p - _scipy_p(a, b, n_resamples=10_000, random_state=3)) < 0.003  # Monte Carlo error


def test_paired_t_equals_scipy() -> None:
    expected = stats.ttest_rel(A, B)
    assert paired_t(A, B) == (pytest.approx(expected.statistic), pytest.approx(expected.pvalue))
    assert all(math.isnan(v) for v in paired_t([0.5], [0.4]))


def test_holm_on_a_textbook_example() -> None:
    # four tests, p = .01, .04, .03, .005: sorted ×4, ×3, ×2, ×1 with the running maximum
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.04, 0.03]) == pytest.approx([0.06, 0.06])  # monotone: never below an earlier step
    assert holm([]) == []


def test_adjacent_groups_and_all_pairs_with_holm() -> None:
    queries = [f"q{i}" for i in range(30)]
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 0.01, (4, 30))
    level = {"top": 0.9, "close": 0.899, "mid": 0.5, "low": 0.1}
    per_query = {s: dict(zip(queries, level[s] + noise[i], strict=True)) for i, s in enumerate(level)}
    order = ["top", "close", "mid", "low"]
    result = adjacent_significance(order, per_query, trials=2000, seed=7)
    assert [t.distinct for t in result.adjacent] == [False, True, True]
    assert dict(result.groups) == {"top": 1, "close": 1, "mid": 2, "low": 3}
    assert all(t.p_holm == t.p_randomisation and t.n_queries == 30 for t in result.adjacent)
    pairs = all_pairs_significance(order, per_query, trials=2000, seed=7)
    assert len(pairs) == 6
    assert [t.p_holm for t in pairs] == pytest.approx(holm([t.p_randomisation for t in pairs]))
    assert {(t.better, t.worse) for t in pairs if not t.distinct} == {("top", "close")}


def test_pairs_on_their_common_queries_only() -> None:
    per_query = {"a": {"q1": 0.9, "q2": 0.8, "q3": 0.7}, "b": {"q2": 0.1, "q3": 0.2, "q4": 0.3}}
    (test,) = adjacent_significance(["a", "b"], per_query, trials=1000).adjacent
    assert test.n_queries == 2 and test.mean_difference == pytest.approx(0.6)
    (none,) = adjacent_significance(["a", "c"], {**per_query, "c": {}}, trials=1000).adjacent
    assert none.n_queries == 0 and none.p_randomisation == 1.0 and not none.distinct


def _board(systems: int, queries: int, seed: int = 3) -> tuple[list[str], dict[str, dict[str, float]]]:
    """``systems`` systems a little apart, on ``queries`` queries (sampled: more queries than log2(trials))."""
    rng = np.random.default_rng(seed)
    names = [f"s{i:02d}" for i in range(systems)]
    scores = rng.random((systems, queries)) * 0.3 - np.arange(systems)[:, None] * 0.02
    return names, {s: {f"q{j}": float(v) for j, v in enumerate(row)} for s, row in zip(names, scores, strict=True)}


def test_all_pairs_p_equals_the_adjacent_p_and_scipy_t() -> None:
    order, per_query = _board(6, 40)
    per_query["s03"].pop("q5")  # a shorter common set for three pairs: still the same p both ways
    adjacent = adjacent_significance(order, per_query, trials=3000, seed=11).adjacent
    pairs = {(t.better, t.worse): t for t in all_pairs_significance(order, per_query, trials=3000, seed=11)}
    for test in adjacent:
        same = pairs[test.better, test.worse]
        assert (same.p_randomisation, same.t, same.p_t) == (test.p_randomisation, test.t, test.p_t)
    for (a, b), test in pairs.items():
        common = sorted(set(per_query[a]) & set(per_query[b]))
        expected = stats.ttest_rel([per_query[a][q] for q in common], [per_query[b][q] for q in common])
        assert (test.t, test.p_t) == (pytest.approx(expected.statistic), pytest.approx(expected.pvalue))
        assert test.p_randomisation == randomisation_test(
            [per_query[a][q] for q in common], [per_query[b][q] for q in common], trials=3000, seed=11
        )


def test_all_pairs_holm_per_family_and_its_floor() -> None:
    order, per_query = _board(8, 30)
    pairs = all_pairs_significance(order, per_query, trials=500, seed=1)
    assert len(pairs) == 28
    assert [t.p_t_holm for t in pairs] == pytest.approx(holm([t.p_t for t in pairs]))
    assert all(t.distinct_t is (t.p_t_holm < 0.05) and t.distinct is (t.p_holm < 0.05) for t in pairs)
    # 500 sampled trials: p ≥ 2/501, so over 28 pairs no Holm-adjusted p goes below 56/501
    assert min_holm_p(28, 500) == pytest.approx(56 / 501)
    assert min(t.p_holm for t in pairs) >= min_holm_p(28, 500) * (1 - 1e-12)  # (28 × p) vs (28 × 2) / 501
    assert not any(t.distinct for t in pairs) and any(t.distinct_t for t in pairs)
