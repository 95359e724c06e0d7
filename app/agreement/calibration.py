"""Calibration of a grader against the judges' overrides: reliability tables and expected calibration error.

An overridden cell is a (pool entry, item) that a judge graded by hand; where the grader graded
the same cell, the pair (grader's prediction, judge's grade) says how far the grader's grades can
be trusted. Grades live on the 0–5 scale; "relevant" means a grade ≥ t (t = 4, as in the paper).

By predicted grade g (the grader's self-rating), over the n_g overridden cells it rated g:

    exact_g        = #{judge = g} / n_g
    at_threshold_g = #{(judge ≥ t) = (g ≥ t)} / n_g

Score mode (cells carrying E[grade] = Σ_k k·P(k)), in the bins [0, 0.5), [0.5, 1.5), …, [3.5, 4.5),
[4.5, 5] (bin b holds the E[grade] that round to b), with N the cells carrying E[grade]:

    ECE        = Σ_b (n_b / N) · |mean E[grade]_b − mean judge_b| / 5        (divided by 5: in [0, 1])
    binary ECE = Σ_b (n_b / N) · |mean P̂_b − share of judge ≥ t in b|

where P̂ of a cell is the grader's probability mass on grades ≥ t when stored (``Grade.probabilities``),
else the indicator "predicted grade ≥ t". Without E[grade] (self-rated graders), the binary ECE runs
over the predicted-grade rows instead and ECE is None; with no overridden cell both are None.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.evaluation.formatting import Table
from app.models import Collection, Grade, GradeOverride, PoolEntry, Query
from app.sqlutil import chunks

THRESHOLD = 4  # "relevant" from this grade on, for the judge and the grader alike
TOP = 5  # the highest grade: the scale of the ECE's normalisation
MISSING = -1  # no predicted grade (an error, or a score-only cell)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class GradeRow:
    """The overridden cells the grader rated ``grade``; ``p_at_least`` is mean P̂(grade ≥ t)."""

    grade: int
    n: int
    exact: float
    at_threshold: float
    p_at_least: float
    judge_at_least: float  # share of these cells the judge graded ≥ t


@dataclass(frozen=True, slots=True)
class BinRow:
    """The overridden cells whose E[grade] lies in [low, high) ([4.5, 5] for the last bin)."""

    low: float
    high: float
    n: int
    mean_expected: float
    mean_judge: float
    p_at_least: float
    judge_at_least: float


@dataclass(frozen=True, slots=True)
class Calibration:
    grader_id: int
    threshold: int
    n: int  # overridden cells the grader graded (with a self-rating or an E[grade])
    by_grade: tuple[GradeRow, ...]
    by_bin: tuple[BinRow, ...]  # empty unless the grader stores E[grade] (score mode)
    ece: float | None
    binary_ece: float | None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def calibrate(
    grader_id: int,
    predicted: IntArray,
    expected: FloatArray,
    p_at_least: FloatArray,
    judge: IntArray,
    threshold: int = THRESHOLD,
) -> Calibration:
    """The reliability tables and ECEs (module docstring) of aligned per-cell arrays: ``predicted``
    (MISSING: none), ``expected`` E[grade] (NaN: none), ``p_at_least`` stored P(grade ≥ t) (NaN: none),
    ``judge`` the judge's grade."""
    rated = predicted != MISSING
    scored = ~np.isnan(expected)
    # P̂: the stored mass, else the prediction's indicator (a score-only cell: its rounded E[grade])
    point = np.where(rated, predicted, _bin_of(np.nan_to_num(expected)))
    p_hat = np.where(np.isnan(p_at_least), (point >= threshold).astype(np.float64), p_at_least)
    judge_high = judge >= threshold
    by_grade = tuple(
        GradeRow(
            grade=g,
            n=int(cells.sum()),
            exact=float(np.mean(judge[cells] == g)),
            at_threshold=float(np.mean(judge_high[cells] == (g >= threshold))),
            p_at_least=float(np.mean(p_hat[cells])),
            judge_at_least=float(np.mean(judge_high[cells])),
        )
        for g in range(TOP + 1)
        if (cells := rated & (predicted == g)).any()
    )
    bins = _bin_of(np.nan_to_num(expected))
    by_bin = tuple(
        BinRow(
            low=max(b - 0.5, 0.0),
            high=min(b + 0.5, float(TOP)),
            n=int(cells.sum()),
            mean_expected=float(np.mean(expected[cells])),
            mean_judge=float(np.mean(judge[cells])),
            p_at_least=float(np.mean(p_hat[cells])),
            judge_at_least=float(np.mean(judge_high[cells])),
        )
        for b in range(TOP + 1)
        if (cells := scored & (bins == b)).any()
    )
    rows: tuple[GradeRow, ...] | tuple[BinRow, ...] = by_bin or by_grade
    total = sum(r.n for r in rows)
    ece = sum(r.n / total * abs(r.mean_expected - r.mean_judge) / TOP for r in by_bin) if by_bin else None
    binary = sum(r.n / total * abs(r.p_at_least - r.judge_at_least) for r in rows) if rows else None
    return Calibration(grader_id, threshold, int((rated | scored).sum()), by_grade, by_bin, ece, binary)


def _bin_of(expected: FloatArray) -> IntArray:
    """The bin of each E[grade]: the grade it rounds to, halves up ([0, 0.5) → 0, …, [4.5, 5] → 5)."""
    return np.clip(np.floor(expected + 0.5), 0, TOP).astype(np.int64)


def p_at_least(probabilities: dict[str, Any] | None, threshold: int) -> float:
    """The stored probability mass on grades ≥ ``threshold`` (NaN when no graded choice is stored)."""
    grades = {int(k): float(p) for k, p in (probabilities or {}).items() if str(k).isdigit()}
    if not grades:
        return float("nan")
    return sum(p for k, p in grades.items() if k >= threshold) / (sum(grades.values()) or 1.0)


def load_calibration(session: Session, collection: Collection, grader_id: int) -> Calibration:
    """The grader's calibration over the collection's overridden cells it graded."""
    rows = _overridden_grades(session, collection, grader_id)
    predicted = [MISSING if self_rating is None or self_rating < 0 else self_rating for _, self_rating, _, _ in rows]
    expected = [np.nan if e is None else e for _, _, e, _ in rows]
    return calibrate(
        grader_id,
        np.asarray(predicted, dtype=np.int64),
        np.asarray(expected, dtype=np.float64),
        np.asarray([p_at_least(p, THRESHOLD) for _, _, _, p in rows], dtype=np.float64),
        np.asarray([rating for rating, _, _, _ in rows], dtype=np.int64),
    )


def _overridden_grades(session: Session, collection: Collection, grader_id: int) -> list[tuple[Any, ...]]:
    """(judge's rating, self-rating, E[grade], probabilities) of every overridden cell the grader graded, in
    override order. Two reads, overrides first: joined in one statement, SQLite's planner walks all of the
    grader's grades (a second per million cells) to find the few overridden ones."""
    overrides = session.execute(
        select(GradeOverride.pool_entry_pk, GradeOverride.item_id, GradeOverride.rating)
        .join(PoolEntry, PoolEntry.id == GradeOverride.pool_entry_pk)
        .join(Query, Query.id == PoolEntry.query_pk)
        .where(Query.collection_id == collection.id)
        .order_by(GradeOverride.id)
    ).all()
    graded: dict[tuple[int, str], tuple[Any, ...]] = {}
    for entries in chunks(sorted({entry for entry, _, _ in overrides})):
        for entry, item, *values in session.execute(
            select(
                Grade.pool_entry_pk, Grade.item_id, Grade.self_rating, Grade.expected_grade, Grade.probabilities
            ).where(Grade.grader_pk == grader_id, Grade.pool_entry_pk.in_(entries))
        ):
            graded[entry, item] = tuple(values)
    return [(rating, *graded[entry, item]) for entry, item, rating in overrides if (entry, item) in graded]


def calibration_tables(result: Calibration) -> list[Table]:
    """The two reliability tables and the ECEs, for tsv/md/latex."""
    t = result.threshold
    by_grade = Table(
        title=f"Calibration by predicted grade (judges' overrides, threshold {t})",
        columns=["grade", "n", "exact", f"agree_at_{t}", f"p_at_least_{t}", f"judge_at_least_{t}"],
        rows=[[r.grade, r.n, r.exact, r.at_threshold, r.p_at_least, r.judge_at_least] for r in result.by_grade],
    )
    by_bin = Table(
        title="Calibration by E[grade] bin",
        columns=["bin", "n", "mean_expected", "mean_judge", f"p_at_least_{t}", f"judge_at_least_{t}"],
        rows=[
            [_bin_label(r), r.n, r.mean_expected, r.mean_judge, r.p_at_least, r.judge_at_least] for r in result.by_bin
        ],
    )
    errors = Table(
        title="Expected calibration error",
        columns=["n", "ece", f"binary_ece_at_{t}"],
        rows=[[result.n, result.ece, result.binary_ece]],
    )
    return [by_grade, by_bin, errors]


def _bin_label(row: BinRow) -> str:
    return f"[{row.low:g}, {row.high:g}{']' if row.high >= TOP else ')'}"
