"""Derive qrels from grades (spec §2.3), and the passage labels shared with the kappa tables (§2.6)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Literal

from app.evaluation.types import GradedPool, PassageGrade, Qrels

LabelMode = Literal["max", "min-answers", "count"]


@dataclass(frozen=True, slots=True)
class LabelRule:
    """How a passage's grades become one integer label.

    max: max_i rating(i, p).  min-answers m: the m-th highest rating (min of the m largest).
    count: |{i : rating(i, p) ≥ τ}|, or |correctAnswered(p)| when τ is None or the grader is
    boolean (the reference's default, non ``-r`` export).
    """

    mode: LabelMode = "max"
    min_answers: int = 1
    min_rating: int | None = None

    @classmethod
    def parse(cls, text: str, *, min_rating: int | None = None) -> LabelRule:
        """Read ``max``, ``count`` or ``min-answers:M``."""
        if text == "max":
            return cls("max", min_rating=min_rating)
        if text == "count":
            return cls("count", min_rating=min_rating)
        name, _, value = text.partition(":")
        if name == "min-answers" and value.isdigit() and int(value) >= 1:
            return cls("min-answers", int(value), min_rating)
        raise ValueError(f"unknown label rule {text!r}: use max, count or min-answers:M (M ≥ 1)")

    def __str__(self) -> str:
        return f"min-answers:{self.min_answers}" if self.mode == "min-answers" else self.mode


def passage_label(grade: PassageGrade, rule: LabelRule) -> int:
    """The label of one passage under ``rule`` (see LabelRule)."""
    if not grade.is_self_rated:
        return len(grade.correct)
    ratings = list(grade.ratings.values())
    if rule.mode == "count":
        if rule.min_rating is None:
            return len(grade.correct)
        return sum(r >= rule.min_rating for r in ratings)
    if not ratings:
        raise ValueError("a self-rated grade without ratings cannot be labelled")
    if rule.mode == "max":
        return max(ratings)
    return min(heapq.nlargest(rule.min_answers, ratings))


def derive_qrels(graded: GradedPool, rule: LabelRule) -> Qrels:
    """One qrels line per graded passage, grade-0 passages included."""
    return {
        query_id: {passage_id: passage_label(grade, rule) for passage_id, grade in pool.items()}
        for query_id, pool in graded.items()
    }


def format_qrels(qrels: Qrels) -> str:
    """TREC qrels text: ``qid 0 docno grade`` per line."""
    return "".join(
        f"{query_id} 0 {passage_id} {grade}\n" for query_id, docs in qrels.items() for passage_id, grade in docs.items()
    )
