"""Bounds of every leaderboard setting, checked once at the boundary (web query strings, CLI options).

Each refusal is an ``Invalid`` whose message names the parameter, so the web answers 400 and the
CLI exits 2 with the same words; nothing past this module sees an unbounded number.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.collections.schemas import ID_MAX, INT32_MAX
from app.errors import Invalid
from app.evaluation.agreement import MAX_JUDGMENT, MIN_JUDGMENT
from app.evaluation.qrels import MAX_MIN_ANSWERS, LabelRule
from app.evaluation.significance import DEFAULT_TRIALS as DEFAULT_TRIALS  # re-exported for the routes
from app.evaluation.significance import MAX_TRIALS
from app.evaluation.trec import MAX_CUTOFF

MIN_RATING = (0, 1000)  # a self-rating threshold (0..5), or a count label's level
TOP_K = (1, MAX_CUTOFF)
MIN_ANSWERS = (1, MAX_MIN_ANSWERS)
MIN_JUDGMENT_RANGE = (MIN_JUDGMENT, MAX_JUDGMENT)
# the manual side's trec_eval level (-l) in per-query correlation: a level ≤ 0 would count
# non-relevant judgments as relevant, 4 makes nothing relevant; TREC DL's binary cut is 2
MANUAL_LEVEL = (1, MAX_JUDGMENT)
DEFAULT_MANUAL_LEVEL = 2
VERSION = (1, INT32_MAX)  # RubricVersion.number is a 32-bit column
ID = (1, ID_MAX)  # a primary key: grader, job, pool entry
BOOTSTRAP = (0, 100_000)  # resamples; 0 = no interval
TRIALS = (100, MAX_TRIALS)  # sign flips of the paired randomisation test (default DEFAULT_TRIALS)


def bounded(name: str, value: int, bounds: tuple[int, int]) -> int:
    low, high = bounds
    if not low <= value <= high:
        raise Invalid(f"{name} must be between {low} and {high}, got {_shown(value)}")
    return value


def bounded_int(
    params: Mapping[str, Any], name: str, bounds: tuple[int, int], default: int | None = None
) -> int | None:
    """The integer query parameter ``name`` within ``bounds``; ``default`` when it is absent or empty."""
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    text = str(raw).strip()
    if len(text) > 20 or not text.lstrip("+-").isdigit():
        raise Invalid(f"{name} must be a whole number, got {_shown(raw)}")
    return bounded(name, int(text), bounds)


def check_label(label: str) -> str:
    LabelRule.parse(label)
    return label


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"
