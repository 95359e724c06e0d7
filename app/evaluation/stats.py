"""Means, standard errors and bootstrap confidence intervals over queries."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from scipy import stats


def mean_stderr(values: Sequence[float]) -> tuple[float, float]:
    """(mean, stderr) with stderr = stdev(values) / √n, stdev using n − 1; stderr 0 if n < 2; (0, 0) if n = 0.

    Both are functions of the values alone, and the exact stdev costs about a millisecond per 500
    values: a recompute after a grading batch reuses those of the systems whose values did not move.
    """
    return _mean_stderr(tuple(values))


MAX_CACHED = 1024  # value lists kept per process, per kind (about 17 boards of 60 systems)


@lru_cache(maxsize=MAX_CACHED)
def _mean_stderr(values: tuple[float, ...]) -> tuple[float, float]:
    n = len(values)
    if n == 0:
        return 0.0, 0.0
    mean = statistics.fmean(values)
    if n < 2:
        return mean, 0.0
    return mean, statistics.stdev(values) / math.sqrt(n)


def bootstrap_ci(values: Sequence[float], *, samples: int, seed: int, confidence: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean, resampling queries with replacement.

    CI = the (1−c)/2 and (1+c)/2 quantiles of mean(x*_b) over b = 1..B resamples x*_b of the
    per-query values. A single query (or identical values) gives the degenerate (x, x).

    The interval is a function of the values in order, B, the seed and c alone, so it is kept by
    those: after a grading batch only the systems whose values moved are resampled again.
    """
    return _bootstrap_ci(tuple(values), samples, seed, confidence)


@lru_cache(maxsize=MAX_CACHED)
def _bootstrap_ci(values: tuple[float, ...], samples: int, seed: int, confidence: float) -> tuple[float, float]:
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return 0.0, 0.0
    if data.size == 1 or np.all(data == data[0]):
        return float(data[0]), float(data[0])
    result = stats.bootstrap(
        (data,),
        np.mean,
        n_resamples=samples,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
        vectorized=True,
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def clear() -> None:
    """Forget every kept result (they are exact by construction; tests start from nothing)."""
    _mean_stderr.cache_clear()
    _bootstrap_ci.cache_clear()
