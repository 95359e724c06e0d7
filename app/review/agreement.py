"""Agreement between judges, and between each judge and the grader over time, from the override log.

Ratings are compared as binary labels at the Cover threshold t (a cell is covered iff rating ≥ t)
with the project's Cohen's κ (app/evaluation/agreement.py), next to the exact agreement rate on
the 0..5 scale:

* judge vs judge: for every pair of judges, the cells both have rated (each judge's latest
  non-undone action left a rating);
* judge vs grader: every non-undone rating action, compared with the grade the judge was shown
  (``model_rating``), grouped by the day it was made (by ISO week when the log spans more than
  ``WEEKLY_AFTER_DAYS`` days). An ``accept`` agrees by definition: it is the judge saying so.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from itertools import combinations

from sqlalchemy.orm import Session

from app.evaluation.agreement import Confusion, confusion_of
from app.models import Collection
from app.review.progress import Action, Cell, latest, log

WEEKLY_AFTER_DAYS = 60


@dataclass(frozen=True, slots=True)
class Agreement:
    """Paired ratings: how many, the exact agreement rate, and κ at the threshold."""

    n: int
    exact: float  # fraction of pairs with equal ratings (0..5)
    kappa: float  # Cohen's κ of (rating ≥ t) between the two sides
    confusion: Confusion  # first side as "predicted", second as "relevant"


def agreement_of(pairs: list[tuple[int, int]], threshold: int) -> Agreement:
    """``pairs`` of ratings (first side, second side); κ of the labels rating ≥ ``threshold``."""
    first = [a >= threshold for a, _ in pairs]
    second = [b >= threshold for _, b in pairs]
    table = confusion_of(first, second)
    exact = sum(a == b for a, b in pairs) / len(pairs) if pairs else 0.0
    return Agreement(len(pairs), exact, table.kappa(), table)


@dataclass(frozen=True, slots=True)
class JudgePair:
    first: str
    second: str
    agreement: Agreement


@dataclass(frozen=True, slots=True)
class TrendPoint:
    judge: str
    period: str  # "YYYY-MM-DD", or "YYYY-Www" when weekly
    agreement: Agreement


@dataclass(frozen=True, slots=True)
class ReviewAgreement:
    threshold: int
    pairs: tuple[JudgePair, ...]  # every pair of judges with at least one cell in common
    granularity: str  # "day" or "week"
    trend: tuple[TrendPoint, ...]  # per judge, per period, oldest first


def judge_pairs(actions: list[Action], threshold: int) -> tuple[JudgePair, ...]:
    """κ per pair of judges over the cells both rated (each judge's latest rating)."""
    ratings: dict[str, dict[Cell, int]] = {}
    for (judge, cell), action in latest(actions).items():
        if action.rating is not None:
            ratings.setdefault(judge, {})[cell] = action.rating
    pairs = []
    for first, second in combinations(sorted(ratings), 2):
        common = sorted(ratings[first].keys() & ratings[second].keys())
        if common:
            together = [(ratings[first][c], ratings[second][c]) for c in common]
            pairs.append(JudgePair(first, second, agreement_of(together, threshold)))
    return tuple(pairs)


def _period(at: datetime, weekly: bool) -> str:
    if weekly:
        year, week, _ = at.isocalendar()
        return f"{year}-W{week:02d}"
    return at.strftime("%Y-%m-%d")


def grader_trend(actions: list[Action], threshold: int) -> tuple[str, tuple[TrendPoint, ...]]:
    """(granularity, per judge per period: the judge's ratings against the grades shown)."""
    rated = [a for a in actions if a.rating is not None and a.model_rating is not None]
    if not rated:
        return "day", ()
    weekly = (max(a.at for a in rated) - min(a.at for a in rated)).days > WEEKLY_AFTER_DAYS
    groups: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for a in rated:
        assert a.rating is not None and a.model_rating is not None
        groups.setdefault((a.judge, _period(a.at, weekly)), []).append((a.rating, a.model_rating))
    points = tuple(
        TrendPoint(judge, period, agreement_of(pairs, threshold)) for (judge, period), pairs in sorted(groups.items())
    )
    return ("week" if weekly else "day"), points


def review_agreement(session: Session, collection: Collection, *, threshold: int = 4) -> ReviewAgreement:
    actions = log(session, collection)
    granularity, trend = grader_trend(actions, threshold)
    return ReviewAgreement(threshold, judge_pairs(actions, threshold), granularity, trend)
