"""Leaderboard rank correlation against an official leaderboard (spec §2.5)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from scipy import stats

from app.errors import Invalid
from app.evaluation.types import Correlation


class MissingSystemsError(Invalid):
    """Officially ranked systems have no predicted score."""

    def __init__(self, missing: Sequence[str]) -> None:
        self.missing = list(missing)
        super().__init__("officially ranked system(s) without a score: " + ", ".join(sorted(self.missing)))


def predicted_ranks(scores: Sequence[float]) -> np.ndarray:
    """Average ranks of −score: the best score gets rank 1, ties share the mean of their ranks."""
    return np.asarray(stats.rankdata([-s for s in scores], method="average"), dtype=float)


def _tau_ap_ordered(official: Sequence[float], order: Sequence[int]) -> float:
    """τ_AP of one predicted order; C(i) for every position at once, summed in the formula's order.

    The counts are integers, so numpy's comparison matrix gives them exactly; the n quotients are
    then added one by one as ``_tau_ap_ordered_loop`` does (numpy's pairwise sum would round
    differently), so the result is the loop's to the last bit.
    """
    ordered = np.asarray([official[i] for i in order], dtype=float)
    above = np.tril(ordered[None, :] < ordered[:, None], k=-1).sum(axis=1)
    total = 0.0
    for position, count in enumerate(above.tolist()[1:], start=1):
        total += count / position
    return 2.0 * total / (len(order) - 1) - 1.0


def _tau_ap_ordered_loop(official: Sequence[float], order: Sequence[int]) -> float:
    """The definition read literally, O(n²) in Python: the oracle the tests compare ``_tau_ap_ordered`` with."""
    total = 0.0
    for position in range(1, len(order)):
        system = order[position]
        above = sum(1 for other in order[:position] if official[other] < official[system])
        total += above / position
    return 2.0 * total / (len(order) - 1) - 1.0


def tau_ap(official: Sequence[float], predicted: Sequence[float]) -> float:
    """AP rank correlation of Yilmaz, Aslam & Robertson (2008), with the official ranking as truth.

    Order the systems by predicted rank. Then
        τ_AP = 2/(n−1) · Σ_{i=2..n} C(i)/(i−1) − 1,
    where C(i) counts the systems above position i that the official ranking also puts strictly
    above the system at position i. τ_AP weighs swaps near the top more than Kendall's τ.
    Predicted ties have no order, so we average τ_AP over the two extreme tie-breaks (by official
    rank ascending and descending) instead of silently favouring one.
    """
    n = len(official)
    if n < 2:
        return math.nan
    best = sorted(range(n), key=lambda i: (predicted[i], official[i], i))
    worst = sorted(range(n), key=lambda i: (predicted[i], -official[i], i))
    return (_tau_ap_ordered(official, best) + _tau_ap_ordered(official, worst)) / 2.0


def rank_correlation(scores: Mapping[str, float], official: Mapping[str, float]) -> Correlation:
    """Spearman ρ and Kendall τ_b between official ranks and average ranks of the scores.

    Only officially ranked systems take part; predicted systems without an official rank are
    ignored, and an official system without a score is an error. Constant scores give NaN.
    """
    missing = [system for system in official if system not in scores]
    if missing:
        raise MissingSystemsError(missing)
    systems = list(official)
    official_ranks = [float(official[s]) for s in systems]
    ranks = predicted_ranks([scores[s] for s in systems])
    if len(systems) < 2:
        return Correlation(math.nan, math.nan, math.nan, len(systems))
    with warnings.catch_warnings():
        # A constant leaderboard has no rank correlation: NaN is the documented answer.
        warnings.simplefilter("ignore", stats.ConstantInputWarning)
        spearman = float(stats.spearmanr(official_ranks, ranks)[0])
        kendall = float(stats.kendalltau(official_ranks, ranks)[0])
    return Correlation(
        spearman=spearman,
        kendall=kendall,
        tau_ap=tau_ap(official_ranks, list(ranks)),
        n_systems=len(systems),
    )


def scores_to_ranks(scores: Mapping[str, float]) -> dict[str, float]:
    """A leaderboard as {system: average rank}, best = 1."""
    systems = list(scores)
    return dict(zip(systems, (float(r) for r in predicted_ranks([scores[s] for s in systems])), strict=True))


MIN_SYSTEMS = 3  # with two systems every rank correlation is ±1: no evidence either way


class Undefined(StrEnum):
    """Why a query has no per-query correlation; the value is the stable code in JSON."""

    FEW_SYSTEMS = "few_systems"
    CONSTANT_MANUAL = "constant_manual"
    CONSTANT_PREDICTED = "constant_predicted"

    @property
    def text(self) -> str:
        return _UNDEFINED_TEXT[self]


_UNDEFINED_TEXT = {
    Undefined.FEW_SYSTEMS: f"fewer than {MIN_SYSTEMS} systems have a score under both judgement sources",
    Undefined.CONSTANT_MANUAL: "every system scores the same on the manual judgments",
    Undefined.CONSTANT_PREDICTED: "every system scores the same on the derived qrels",
}


@dataclass(frozen=True, slots=True)
class QueryCorrelation:
    """One query's correlation, or (``reason`` set, coefficients NaN) why it is undefined."""

    correlation: Correlation
    reason: Undefined | None = None


def undefined_reason(predicted: Sequence[float], reference: Sequence[float]) -> Undefined | None:
    """Why Spearman ρ / Kendall τ of the two score lists is undefined, or None when it is defined.

    Both coefficients divide by the spread of the ranks, so they need at least two distinct values
    on each side; below ``MIN_SYSTEMS`` systems we call them undefined as well (ρ = τ = ±1 by force).
    """
    if len(reference) < MIN_SYSTEMS:
        return Undefined.FEW_SYSTEMS
    if len(set(reference)) < 2:
        return Undefined.CONSTANT_MANUAL
    if len(set(predicted)) < 2:
        return Undefined.CONSTANT_PREDICTED
    return None


def per_query_correlation(
    predicted: Mapping[str, Mapping[str, float]], reference: Mapping[str, Mapping[str, float]]
) -> dict[str, QueryCorrelation]:
    """For each query, correlate the systems' per-query scores under two judgement sources.

    ``predicted`` and ``reference`` map system → query → value (e.g. P@20 under the derived qrels
    and under the manual qrels). Only systems with a value under both take part in a query. A query
    whose correlation is undefined (``undefined_reason``) carries the reason and NaN coefficients.
    """
    queries = sorted({q for per_query in reference.values() for q in per_query})
    result = {}
    for query_id in queries:
        systems = [s for s in reference if query_id in reference[s] and query_id in predicted.get(s, {})]
        manual = {s: reference[s][query_id] for s in systems}
        derived = {s: predicted[s][query_id] for s in systems}
        reason = undefined_reason(list(derived.values()), list(manual.values()))
        if reason is not None:
            result[query_id] = QueryCorrelation(Correlation(math.nan, math.nan, math.nan, len(systems)), reason)
        else:
            result[query_id] = QueryCorrelation(rank_correlation(derived, scores_to_ranks(manual)))
    return result
