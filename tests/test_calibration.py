"""A grader's calibration against the judges' overrides, by hand (the pages: tests/web/test_calibration_web.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.agreement.calibration import MISSING, calibrate, p_at_least

NAN = float("nan")


def _ints(*values: int) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def _floats(*values: float) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)


def test_self_rated_reliability_by_grade_and_binary_ece_by_hand() -> None:
    result = calibrate(
        7, _ints(5, 5, 3, 0), _floats(NAN, NAN, NAN, NAN), _floats(NAN, NAN, NAN, NAN), _ints(5, 3, 3, 1)
    )
    assert [(r.grade, r.n, r.exact, r.at_threshold, r.p_at_least, r.judge_at_least) for r in result.by_grade] == [
        (0, 1, 0.0, 1.0, 0.0, 0.0),
        (3, 1, 1.0, 1.0, 0.0, 0.0),
        (5, 2, 0.5, 0.5, 1.0, 0.5),
    ]
    assert result.by_bin == () and result.ece is None and result.n == 4
    assert result.binary_ece == pytest.approx(2 / 4 * 0.5)  # only grade 5 is off: P̂ = 1, judge ≥ 4 in half


def test_score_mode_bins_and_both_eces_by_hand() -> None:
    result = calibrate(
        7,
        predicted=_ints(5, 5, 4, 2, MISSING),
        expected=_floats(4.8, 4.6, 4.2, 2.0, 0.2),
        p_at_least=_floats(0.9, NAN, 0.6, NAN, NAN),  # NaN: the indicator of the prediction (of E rounded)
        judge=_ints(5, 4, 3, 2, 0),
    )
    bins = [(r.low, r.high, r.n, r.mean_expected, r.mean_judge, r.p_at_least, r.judge_at_least) for r in result.by_bin]
    expected = [(0, 0.5, 1, 0.2, 0, 0, 0), (1.5, 2.5, 1, 2, 2, 0, 0), (3.5, 4.5, 1, 4.2, 3, 0.6, 0)]
    expected.append((4.5, 5, 2, 4.7, 4.5, 0.95, 1))
    assert [list(row) for row in bins] == [pytest.approx(row) for row in expected]
    # ECE = (2/5·|4.7 − 4.5| + 1/5·|4.2 − 3| + 1/5·|2 − 2| + 1/5·|0.2 − 0|) / 5
    assert result.ece == pytest.approx((0.08 + 0.24 + 0.04) / 5)
    assert result.binary_ece == pytest.approx(2 / 5 * 0.05 + 1 / 5 * 0.6)
    assert result.n == 5 and sum(r.n for r in result.by_grade) == 4  # the score-only cell has no grade row


def test_no_overrides_no_rows_and_no_error() -> None:
    empty = _ints()
    result = calibrate(7, empty, _floats(), _floats(), empty)
    assert (result.n, result.by_grade, result.by_bin, result.ece, result.binary_ece) == (0, (), (), None, None)
    assert json.loads(json.dumps(result.as_json()))["ece"] is None


def test_probability_mass_at_the_threshold() -> None:
    assert p_at_least({"0": 0.1, "4": 0.3, "5": 0.6}, 4) == pytest.approx(0.9)
    assert np.isnan(p_at_least({"Yes": 0.7, "No": 0.3}, 4)) and np.isnan(p_at_least(None, 4))
