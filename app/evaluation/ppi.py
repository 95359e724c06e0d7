"""Prediction-powered inference (PPI) over a finite population of graded rows.

The LLM grades every one of the N rows of the pool (its predictions f_u); a judge labels a
uniform sample S of n rows drawn without replacement (the human labels Y_u, binary). For a measure
that is linear in the rows' labels, θ_s = Σ_u w_su·Y_u, the prediction-powered estimate is the
survey difference (regression) estimator

    θ̂_s(λ) = λ·Σ_{u=1..N} w_su·f_u + (N/n)·Σ_{u∈S} w_su·(Y_u − λ·f_u)
    Var̂    = N²·(1 − n/N)/n · s²_S( w_su·(Y_u − λ·f_u) )        (s² the sample variance, ddof 1)
    CI     = θ̂ ± z_{1−α/2}·√Var̂

It is unbiased for θ_s for every fixed λ because the sample is uniform; the factor (1 − n/N) is the
finite-population correction, so at n = N the interval has zero width and θ̂ = θ exactly. λ = 1 is
plain PPI, λ = 0 the classical (human-only) expansion estimator. PPI++ power tuning takes ONE λ
shared by all systems, the minimiser of the summed variances Σ_s Var̂_s(λ):

    λ̂ = Σ_s Cov_S(w_s·Y, w_s·f) / Σ_s Var_S(w_s·f),   clipped to [0, 1]

A system's top k holds only a few of the n sampled rows, so a per-system λ̂_s fitted on those few
rows is noisy and, being fitted on the same rows, shrinks the interval optimistically; pooled over
the systems the ratio is stable (measured in docs/ppi.md: P@10 at n = 200 covers 0.884 against 0.782).

No interval is reported where it would be dishonest or undefined (``stderr`` None, ``no_interval``
says why): n = 0 (the estimate is the LLM-only value Σ_u w_su·f_u exactly), n = 1 (the sample
variance needs two rows), and a zero sample variance of a system's residuals while n < N: the
labelled rows in its *support* (those with w_su ≠ 0, for P@k and Cover its top k) showed no
disagreement, which is not certainty. At n = N the zero-width interval is exact and is reported.
``within`` clips an estimate and its interval to a measure's range (P@k and Cover lie in [0, 1]).

Measures that are not linear in the rows (Cover: a union over the top-k passages) use the
linearised difference estimator of ``ppi_linearised``. The functions are pure: the caller has
already checked its data, so a ``ValueError`` here is a programmer's error (shapes), never a user's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import sparse, stats

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class PPIEstimate:
    """One system's prediction-powered value next to its LLM-only one.

    ``plain`` is Σ_u w_u·f_u (for Cover: Cover_s(f)); ``stderr``, ``ci_low`` and ``ci_high`` are
    None when there is no honest interval, and ``no_interval`` then says why (module docstring).
    ``n_labels`` is n, ``n_units`` the population N, ``support`` the labelled rows that weigh on this
    system (w_su ≠ 0: for P@k and Cover the rows in its top k) and ``tuning`` the λ used (1.0 = plain
    PPI; the linearised estimator always uses 1.0).
    """

    plain: float
    estimate: float
    stderr: float | None
    ci_low: float | None
    ci_high: float | None
    n_labels: int
    n_units: int
    tuning: float
    support: int = 0
    no_interval: str | None = None


def ppi_linear(
    weights: Any,
    predictions: Any,
    labelled: Any,
    labels: Any,
    *,
    alpha: float = 0.05,
    power_tuning: bool = True,
) -> list[PPIEstimate]:
    """The difference estimator θ̂_s(λ) (module docstring) for every system s.

    weights: (S, N) dense ndarray or scipy.sparse, one row per system; predictions f: (N,) float;
    labelled: (n,) int indices of the labelled units (distinct); labels Y: (n,) float.
    λ is PPI++'s shared Σ_s Cov_S(w_s·Y, w_s·f) / Σ_s Var_S(w_s·f) clipped to [0, 1] with
    ``power_tuning`` (1.0 when n < 2 or every w_s·f is constant on the sample, where λ does not
    change the variance), else 1.0.
    """
    w, f, rows, y = _linear_inputs(weights, predictions, labelled, labels)
    plain = _as_dense(w @ f).reshape(-1)
    sample = _columns(w, rows)
    human, model = sample * y, sample * f[rows]
    tuning = np.full(len(plain), _power_tuning(human, model) if power_tuning else 1.0)
    return _difference(
        plain, human - tuning[:, None] * model, tuning, w.shape[1], alpha, support=(sample != 0).sum(axis=1)
    )


def classical_linear(
    weights: Any, predictions: Any, labelled: Any, labels: Any, *, alpha: float = 0.05
) -> list[PPIEstimate]:
    """θ̂_s(0) = (N/n)·Σ_{u∈S} w_su·Y_u: the human-only estimate from the same rows (λ = 0).

    ``plain`` still reports the LLM-only Σ_u w_su·f_u, so the three boards can be compared side by side.
    """
    w, f, rows, y = _linear_inputs(weights, predictions, labelled, labels)
    plain = _as_dense(w @ f).reshape(-1)
    tuning = np.zeros(len(plain))
    sample = _columns(w, rows)
    return _difference(plain, sample * y, tuning, w.shape[1], alpha, support=(sample != 0).sum(axis=1))


def ppi_linearised(
    plain: Any, effects: Any, n_units: int, *, alpha: float = 0.05, support: Any = None
) -> list[PPIEstimate]:
    """The first-order difference estimator for a measure M_s that is not linear in the rows.

        θ̂_s = M_s(f) + (N/n)·Σ_{u∈S} Δ_su,   Δ_su = M_s(f with row u's labels put in) − M_s(f)
        Var̂ = N²·(1 − n/N)/n · s²_S(Δ_su),     λ = 1

    plain: (S,) M_s(f); effects: (S, n) Δ_su for the labelled units; support: (S,) the labelled
    units that weigh on each system (for Cover: in its top k), by default those with Δ_su ≠ 0. It
    is exact when the rows' corrections do not interact (for Cover: no two wrongly-graded rows share
    a (system, query, item) union); otherwise overlapping corrections are counted twice (it overshoots) and its bias is
    second order in the error rate.
    """
    base = np.asarray(plain, dtype=np.float64).reshape(-1)
    delta = np.asarray(effects, dtype=np.float64)
    if delta.ndim != 2 or delta.shape[0] != base.shape[0]:
        raise ValueError(f"effects must be (S, n) with S = {base.shape[0]}, got {delta.shape}")
    if not 0 <= delta.shape[1] <= n_units:
        raise ValueError(f"{delta.shape[1]} labelled units out of a population of {n_units}")
    counts = (delta != 0).sum(axis=1) if support is None else np.asarray(support, dtype=np.int64).reshape(-1)
    return _difference(base, delta, np.ones(len(base)), n_units, alpha, support=counts)


def _linear_inputs(
    weights: Any, predictions: Any, labelled: Any, labels: Any
) -> tuple[Any, FloatArray, Any, FloatArray]:
    """Checked (W, f, labelled rows, Y); W stays sparse (CSC, for column picks) when it came sparse."""
    w = (
        sparse.csc_matrix(weights, dtype=np.float64)
        if sparse.issparse(weights)
        else np.asarray(weights, dtype=np.float64)
    )
    if w.ndim != 2:
        raise ValueError(f"weights must be (S, N), got shape {w.shape}")
    f = np.asarray(predictions, dtype=np.float64).reshape(-1)
    rows = np.asarray(labelled, dtype=np.int64).reshape(-1)
    y = np.asarray(labels, dtype=np.float64).reshape(-1)
    n_units = w.shape[1]
    if f.shape[0] != n_units:
        raise ValueError(f"{f.shape[0]} predictions for {n_units} units")
    if rows.shape != y.shape:
        raise ValueError(f"{rows.shape[0]} labelled indices but {y.shape[0]} labels")
    if rows.size and (rows.min() < 0 or rows.max() >= n_units or np.unique(rows).size != rows.size):
        raise ValueError("labelled indices must be distinct units in [0, N)")
    return w, f, rows, y


def _as_dense(matrix: Any) -> FloatArray:
    return np.asarray(matrix.toarray() if sparse.issparse(matrix) else matrix, dtype=np.float64)


def _columns(w: Any, rows: Any) -> FloatArray:
    """W[:, rows] as a dense (S, n) array (n is a sample, so dense is small)."""
    return _as_dense(w[:, rows])


def _power_tuning(human: FloatArray, model: FloatArray) -> float:
    """λ̂ = Σ_s Cov_S(w_s·Y, w_s·f) / Σ_s Var_S(w_s·f) clipped to [0, 1]; 1.0 where undefined (n < 2, Var = 0).

    The minimiser of Σ_s Var̂_s(λ) (each Var̂_s is a quadratic in λ with the same factor N²(1 − n/N)/n),
    so the clipped λ̂ never gives a larger summed variance than λ = 1 does.
    """
    if model.shape[1] < 2:
        return 1.0
    model_centred = model - model.mean(axis=1, keepdims=True)
    human_centred = human - human.mean(axis=1, keepdims=True)
    covariance = float((human_centred * model_centred).sum())
    variance = float((model_centred * model_centred).sum())
    return min(max(covariance / variance, 0.0), 1.0) if variance > 0 else 1.0


def within(estimate: PPIEstimate, low: float = 0.0, high: float = 1.0) -> PPIEstimate:
    """The estimate and its interval clipped to the measure's range [low, high] (P@k and Cover: [0, 1]).

    The true value lies in the range, so intersecting the interval with it never drops the truth
    (coverage unchanged), and clipping the point estimate never moves it further from the truth
    (it trades the estimator's unbiasedness for a smaller error). An interval that lies wholly
    outside the range would clip to a single point and read as certainty; it only shows that the
    normal approximation has broken down (too few labelled rows), so it becomes no interval.
    """

    def clip(value: float | None) -> float | None:
        return None if value is None else min(max(value, low), high)

    clipped = replace(estimate, estimate=min(max(estimate.estimate, low), high))
    if estimate.ci_low is None or estimate.ci_high is None:
        return clipped
    if estimate.ci_low > high or estimate.ci_high < low:
        reason = (
            f"none: the interval [{estimate.ci_low:.3f}, {estimate.ci_high:.3f}] lies outside [{low:g}, {high:g}]"
            f" (too few labelled rows for the normal approximation)"
        )
        return replace(clipped, stderr=None, ci_low=None, ci_high=None, no_interval=reason)
    return replace(clipped, ci_low=clip(estimate.ci_low), ci_high=clip(estimate.ci_high))


def _no_interval(n: int, n_units: int, variance: float, support: int) -> str | None:
    """Why a system gets no interval (module docstring), None when it gets one."""
    if n == 0:
        return "none: no labelled rows"
    if n == 1:
        return "none: one labelled row (the variance needs two)"
    if variance > 0 or n == n_units:
        return None
    if support == 0:
        return "none: no labelled row in this system's top k"
    rows = "row" if support == 1 else "rows"
    return f"none: no disagreement among the {support} labelled {rows} in this system's top k"


def _difference(
    plain: FloatArray, residuals: FloatArray, tuning: FloatArray, n_units: int, alpha: float, *, support: Any
) -> list[PPIEstimate]:
    """λ_s·plain_s + (N/n)·Σ residuals_su with the finite-population variance of the module docstring."""
    n = residuals.shape[1]
    supports = np.asarray(support, dtype=np.int64).reshape(-1).tolist()
    if n == 0:
        return [
            PPIEstimate(
                plain=p,
                estimate=p,
                stderr=None,
                ci_low=None,
                ci_high=None,
                n_labels=0,
                n_units=n_units,
                tuning=t,
                support=0,
                no_interval=_no_interval(0, n_units, 0.0, 0),
            )
            for p, t in zip(plain.tolist(), tuning.tolist(), strict=True)
        ]
    estimate = tuning * plain + (n_units / n) * residuals.sum(axis=1)
    variances = [0.0] * len(plain)
    if n >= 2:
        variances = np.maximum(n_units**2 * (1 - n / n_units) / n * residuals.var(axis=1, ddof=1), 0.0).tolist()
    z = float(stats.norm.ppf(1 - alpha / 2))
    result = []
    for p, e, v, t, m in zip(plain.tolist(), estimate.tolist(), variances, tuning.tolist(), supports, strict=True):
        reason = _no_interval(n, n_units, v, m)
        se = None if reason is not None else float(np.sqrt(v))
        result.append(
            PPIEstimate(
                plain=p,
                estimate=e,
                stderr=se,
                ci_low=None if se is None else e - z * se,
                ci_high=None if se is None else e + z * se,
                n_labels=n,
                n_units=n_units,
                tuning=t,
                support=m,
                no_interval=reason,
            )
        )
    return result
