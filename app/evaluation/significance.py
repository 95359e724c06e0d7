"""Paired significance tests between systems over queries: randomisation, t-test, Holm correction.

Two systems are compared on the queries both have a score for (Cover leaves a query out of a
system's mean where it ranks no graded passage, so pairing on the common queries compares like
with like). The tests are pure functions of the per-query scores: the CLI and the web render the
same ``Significance`` value.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
from scipy import stats

ALPHA = 0.05
DEFAULT_TRIALS = 10_000
MAX_TRIALS = 100_000
_EXACT_MAX_QUERIES = 20  # 2^20 sign vectors × n is still cheap; above, sample
_TIE_EPS = np.finfo(float).eps * 100  # scipy's relative tolerance when comparing with the observed statistic
_CHUNK_CELLS = 1 << 18  # pairs × trials per block of the null matrix: 2 MiB of floats, cache-sized for all pairs


@dataclass(frozen=True, slots=True)
class PairTest:
    """One paired comparison of ``better`` (the higher-ranked) against ``worse``.

    ``p_randomisation`` is the two-sided sign-flip p-value, ``t``/``p_t`` the paired t-test's
    statistic and p-value (NaN when undefined: fewer than two common queries, or constant
    differences). ``p_holm`` is the randomisation p-value Holm-adjusted over its family (all pairs);
    for the adjacent pairs, each its own question, it is ``p_randomisation`` unchanged.
    ``distinct`` is ``p_holm < alpha``: the two systems can be told apart. ``p_t_holm`` and
    ``distinct_t`` are the same for the t-test's family (NaN p-values stay NaN and are not distinct).
    """

    better: str
    worse: str
    n_queries: int
    mean_difference: float
    p_randomisation: float
    t: float
    p_t: float
    p_holm: float
    distinct: bool
    p_t_holm: float = math.nan
    distinct_t: bool = False


@dataclass(frozen=True, slots=True)
class Significance:
    """Adjacent-pair tests down a ranked board and the groups of systems they cannot tell apart.

    ``adjacent[i]`` compares ``order[i]`` with ``order[i + 1]`` (uncorrected: each pair is its own
    question, "is this system better than the next one down?"). ``groups[s]`` numbers the maximal
    runs of consecutive systems joined by non-significant adjacent pairs, from 1 at the top.
    ``all_pairs`` (when asked for) tests every pair i < j in ``order`` with Holm's correction over
    the family of all pairs, each test its own family (``all_pairs_significance``).
    """

    alpha: float
    trials: int
    seed: int
    order: tuple[str, ...]
    adjacent: tuple[PairTest, ...]
    groups: Mapping[str, int]
    all_pairs: tuple[PairTest, ...] = ()


def paired_scores(a: Mapping[str, float], b: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """The two systems' scores on their common queries, in one (sorted) query order."""
    common = sorted(set(a) & set(b))
    return np.array([a[q] for q in common], dtype=float), np.array([b[q] for q in common], dtype=float)


def _exact_signs(n: int) -> np.ndarray:
    """All 2^n sign vectors, one per column (n × 2^n)."""
    codes = np.arange(n, dtype=np.int64)[:, None]
    return np.where((np.arange(2**n, dtype=np.int64)[None, :] >> codes) & 1, -1.0, 1.0)


def _sampled_signs(n: int, trials: int, seed: int) -> np.ndarray:
    """``trials`` seeded sign vectors, one per column (n × trials).

    numpy fills the draw row by row, so the first k rows of a draw for n ≥ k queries equal the draw
    for k: one draw for the longest pair serves every shorter one, and each p-value still depends
    only on its own pair's length, the trials and the seed.
    """
    bits = np.random.default_rng(seed).integers(0, 2, size=(n, trials), dtype=np.int8)
    return np.where(bits == 1, -1.0, 1.0)


def randomisation_test(
    a: Sequence[float], b: Sequence[float], *, trials: int = DEFAULT_TRIALS, seed: int = 42
) -> float:
    """Two-sided paired randomisation (sign-flip) p-value of mean(a − b), as scipy's permutation_test.

    With d_q = a_q − b_q, the statistic is T = mean(d); under H0 each d_q's sign is exchangeable,
    so T*_s = mean(s ⊙ d) for sign vectors s ∈ {−1, 1}^n. With γ = 100·ε·|T|:
        exact (2^n ≤ trials):  p_≥ = #{s : T*_s ≥ T − γ} / 2^n,      p_≤ likewise with T*_s ≤ T + γ
        sampled (B = trials):  p_≥ = (#{b : T*_b ≥ T − γ} + 1) / (B + 1)
        p = min(1, 2·min(p_≥, p_≤)).
    The sampled draws come from ``numpy.random.default_rng(seed)``: the same inputs give the same p.
    Fewer than one common query gives p = 1 (nothing to tell apart).
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(_randomisation_many([x - y], trials=trials, seed=seed)[0])


def _randomisation_many(differences: Sequence[np.ndarray], *, trials: int, seed: int) -> list[float]:
    """``randomisation_test`` of several difference vectors, vectorised over trials × queries.

    Sign vectors are drawn once (for the longest pair) and shared, so each p-value depends only on
    its own differences, the trials and the seed, never on the other pairs.
    """
    p_values = [1.0] * len(differences)
    lengths = sorted({len(d) for d in differences if len(d)})
    sampled = [n for n in lengths if not _is_exact(n, trials)]
    shared = _sampled_signs(max(sampled), trials, seed) if sampled else None
    for n in lengths:
        exact = _is_exact(n, trials)
        signs = _exact_signs(n) if exact or shared is None else shared[:n]
        which = [i for i, d in enumerate(differences) if len(d) == n]
        adjust = 0 if exact else 1
        total = signs.shape[1] + adjust
        chunk = max(1, _CHUNK_CELLS // signs.shape[1])
        for start in range(0, len(which), chunk):
            part = which[start : start + chunk]
            greater, less = _tail_counts(np.stack([differences[i] for i in part]), signs)
            p = np.minimum(1.0, 2 * np.minimum(greater + adjust, less + adjust) / total)
            for i, value in zip(part, p.tolist(), strict=True):
                p_values[i] = value
    return p_values


def _tail_counts(stacked: np.ndarray, signs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``stacked`` (pairs × n): how many sign-flipped means reach the observed one, each side."""
    n = stacked.shape[1]
    observed = stacked.mean(axis=1, keepdims=True)
    null = stacked @ signs / n  # pairs × trials
    gamma = np.abs(_TIE_EPS * observed)
    return np.count_nonzero(null >= observed - gamma, axis=1), np.count_nonzero(null <= observed + gamma, axis=1)


def _is_exact(n: int, trials: int) -> bool:
    """Enumerate every sign vector when there are no more of them than trials (scipy's rule)."""
    return n <= _EXACT_MAX_QUERIES and 2**n <= trials


def paired_t(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(t, p) of the two-sided paired t-test (scipy.stats.ttest_rel): t = mean(d) / (sd(d)/√n), n − 1 df.

    NaN, NaN below two pairs or when every difference is the same (sd = 0 and mean 0).
    """
    return _paired_t_many([(np.asarray(a, dtype=float), np.asarray(b, dtype=float))])[0]


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order.

    With p_(1) ≤ … ≤ p_(m) sorted ascending, p̃_(i) = max_{j ≤ i} min(1, (m − j + 1)·p_(j)).
    Rejecting p̃ < α controls the family-wise error rate at α (Holm 1979). NaN stays NaN.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: (math.isnan(p_values[i]), p_values[i]))
    adjusted = [math.nan] * m
    running = 0.0
    for rank, i in enumerate(order):
        if math.isnan(p_values[i]):
            continue
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def _pair_tests(
    pairs: Sequence[tuple[str, str]],
    per_query: Mapping[str, Mapping[str, float]],
    *,
    trials: int,
    seed: int,
    alpha: float,
    correct: bool,
) -> tuple[PairTest, ...]:
    paired = _paired_many(pairs, per_query)
    differences = [x - y for x, y in paired]
    p_values = _randomisation_many(differences, trials=trials, seed=seed)
    t_tests = _paired_t_many(paired)
    p_ts = [p_t for _, p_t in t_tests]
    adjusted, adjusted_t = (holm(p_values), holm(p_ts)) if correct else (p_values, p_ts)
    tests = []
    for (better, worse), d, p, p_adj, (t, p_t), p_t_adj in zip(
        pairs, differences, p_values, adjusted, t_tests, adjusted_t, strict=True
    ):
        diff = float(d.sum() / len(d)) if len(d) else 0.0
        tests.append(PairTest(better, worse, len(d), diff, p, t, p_t, p_adj, p_adj < alpha, p_t_adj, p_t_adj < alpha))
    return tuple(tests)


def _paired_many(
    pairs: Sequence[tuple[str, str]], per_query: Mapping[str, Mapping[str, float]]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``paired_scores`` of every pair; systems scored on the same queries share one array each.

    (All pairs of S systems read each system S − 1 times: building its array once is most of the work saved.)
    """
    keys = {s: frozenset(per_query[s]) for pair in pairs for s in pair}
    arrays = {s: np.array([per_query[s][q] for q in sorted(k)], dtype=float) for s, k in keys.items()}
    return [
        (arrays[a], arrays[b]) if keys[a] == keys[b] else paired_scores(per_query[a], per_query[b]) for a, b in pairs
    ]


def _paired_t_many(paired: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[tuple[float, float]]:
    """``paired_t`` of every pair, one scipy call per common length (scipy's overhead is per call)."""
    results = [(math.nan, math.nan)] * len(paired)
    for n in sorted({len(x) for x, _ in paired if len(x) >= 2}):
        which = [i for i, (x, _) in enumerate(paired) if len(x) == n]
        xs = np.stack([paired[i][0] for i in which], axis=1)
        ys = np.stack([paired[i][1] for i in which], axis=1)
        with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
            # equal or near-equal systems (ties are common on a board) are an answer here, not a fault
            warnings.simplefilter("ignore", RuntimeWarning)
            result = stats.ttest_rel(xs, ys, axis=0)
        for i, t, p in zip(which, np.atleast_1d(result.statistic), np.atleast_1d(result.pvalue), strict=True):
            results[i] = (float(t), float(p))
    return results


def adjacent_significance(
    order: Sequence[str],
    per_query: Mapping[str, Mapping[str, float]],
    *,
    trials: int = DEFAULT_TRIALS,
    seed: int = 42,
    alpha: float = ALPHA,
) -> Significance:
    """Each system in ``order`` (best first) against the next one down, and the groups this implies.

    A group is a maximal run order[i..j] whose adjacent pairs are all not ``distinct``: a reader
    cannot tell its neighbours apart at α, so the board's order inside a group is not evidence.
    (Adjacent non-significance is not transitive: the ends of a long group may still differ,
    which ``all_pairs_significance`` answers.)
    """
    pairs = list(zip(order, order[1:], strict=False))
    adjacent = _pair_tests(pairs, per_query, trials=trials, seed=seed, alpha=alpha, correct=False)
    groups: dict[str, int] = {}
    group = 1
    for i, system in enumerate(order):
        if i > 0 and adjacent[i - 1].distinct:
            group += 1
        groups[system] = group
    return Significance(alpha, trials, seed, tuple(order), adjacent, groups)


def min_holm_p(n_pairs: int, trials: int) -> float:
    """The smallest Holm-adjusted randomisation p that ``trials`` sampled sign flips allow over ``n_pairs``.

    Sampled: p ≥ 2/(B + 1), so Holm's first step gives at least min(1, m·2/(B + 1)). (Exact
    enumeration, for at most log2(B) queries, has its own floor 2/2^n; this bound is for the sampled test.)
    """
    return min(1.0, n_pairs * 2 / (trials + 1)) if n_pairs else 1.0


def all_pairs_significance(
    order: Sequence[str],
    per_query: Mapping[str, Mapping[str, float]],
    *,
    trials: int = DEFAULT_TRIALS,
    seed: int = 42,
    alpha: float = ALPHA,
) -> tuple[PairTest, ...]:
    """Every pair (i < j in ``order``) with Holm's correction over the m = S(S−1)/2 pairs, per test.

    The randomisation p-values and the t-test p-values are two families, each Holm-adjusted on its
    own. A pair's raw p-values equal its adjacent-pair ones for the same trials and seed (the sign
    draws are shared and depend on neither the other pairs nor their number). The sampled test's
    smallest p is 2/(B + 1), so the smallest Holm-adjusted one is min(1, 2m/(B + 1)): with B = 10,000
    trials and 37 systems (m = 666) that is 0.13, and no pair is distinct at α = 0.05 by
    randomisation alone; ``min_holm_p`` says so, and the t-test family has no such floor.
    """
    pairs = list(combinations(order, 2))
    return _pair_tests(pairs, per_query, trials=trials, seed=seed, alpha=alpha, correct=True)
