"""Derive qrels from grades (spec §2.3), and the passage labels shared with the kappa tables (§2.6)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Literal

import numpy as np

from app.errors import Invalid
from app.evaluation.frame import NO_RATING, BoolArray, GradeFrame, IntArray, PoolIndex
from app.evaluation.types import GradedPool, PassageGrade, Qrels

LabelMode = Literal["max", "min-answers", "count"]
MAX_MIN_ANSWERS = 1000


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
        """Read ``max``, ``count`` or ``min-answers:M`` (1 ≤ M ≤ MAX_MIN_ANSWERS); else ``Invalid``."""
        if text == "max":
            return cls("max", min_rating=min_rating)
        if text == "count":
            return cls("count", min_rating=min_rating)
        name, _, value = text.partition(":")
        if name == "min-answers" and value.isdigit() and len(value) <= 6 and 1 <= int(value) <= MAX_MIN_ANSWERS:
            return cls("min-answers", int(value), min_rating)
        shown = text if len(text) <= 40 else text[:40] + "…"
        raise Invalid(f"unknown label rule {shown!r}: use max, count or min-answers:M (1 ≤ M ≤ {MAX_MIN_ANSWERS})")

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
        raise Invalid("a self-rated grade without ratings cannot be labelled")
    if rule.mode == "max":
        return max(ratings)
    return min(heapq.nlargest(rule.min_answers, ratings))


def frame_labels(grades: GradeFrame, rule: LabelRule) -> tuple[IntArray, IntArray]:
    """(graded entries in pool order, their labels): ``passage_label`` for every passage at once.

    Linear in the cells: entries are numbered by a presence count (no sort), max is a scatter-max;
    only min-answers sorts each entry's ratings.
    """
    present = np.bincount(grades.entry, minlength=grades.pool.n_entries) > 0
    entries: IntArray = np.flatnonzero(present)
    cell_entry = (np.cumsum(present) - 1)[grades.entry]
    rated = grades.rating != NO_RATING

    def count(cells: BoolArray) -> IntArray:
        counts: IntArray = np.bincount(cell_entry[cells], minlength=len(entries))
        return counts

    if not grades.is_self_rated or (rule.mode == "count" and rule.min_rating is None):
        return entries, count(grades.correct)
    if rule.mode == "count":
        return entries, count(rated & (grades.rating >= (rule.min_rating or 0)))
    n_rated = count(rated)
    unrated = entries[n_rated == 0]
    if len(unrated):
        raise Invalid(_unrated_message(grades, unrated, rule))
    if rule.mode == "max":
        return entries, _max_rating(cell_entry[rated], grades.rating[rated], len(entries))
    # rated cells sorted by entry, highest rating first: the m-th highest is at offset min(m, n) − 1
    order = np.lexsort((-grades.rating[rated], cell_entry[rated]))
    ratings, starts = grades.rating[rated][order], np.searchsorted(cell_entry[rated][order], np.arange(len(entries)))
    offsets = np.minimum(rule.min_answers, n_rated) - 1
    return entries, ratings[starts + offsets]


MAX_RATING_SWEEP = 32  # a rating span up to which counting per (entry, rating) beats ``np.maximum.at``


def _max_rating(cell_entry: IntArray, ratings: IntArray, n_entries: int) -> IntArray:
    """Per entry, the max of its cells' ratings (every entry has at least one cell).

    Ratings span a few values (0..5): count the cells per (entry, rating) in one bincount and take
    each entry's highest rating with a count, instead of one slow unbuffered ``np.maximum.at``.
    """
    if not len(ratings):
        return np.zeros(0, dtype=np.int64)
    low, high = int(ratings.min()), int(ratings.max())
    span = high - low + 1
    if span > MAX_RATING_SWEEP:
        best = np.full(n_entries, NO_RATING, dtype=np.int64)
        np.maximum.at(best, cell_entry, ratings)
        return best
    counts = np.bincount(cell_entry * span + (ratings - low), minlength=n_entries * span).reshape(n_entries, span)
    highest: IntArray = high - np.argmax(counts[:, ::-1] > 0, axis=1)
    return highest


def _unrated_message(grades: GradeFrame, unrated: IntArray, rule: LabelRule) -> str:
    first = int(unrated[0])
    example = f"{grades.pool.query_ids[int(grades.pool.entry_query[first])]}/{grades.pool.passage_ids[first]}"
    return (
        f"a self-rated grade without ratings cannot be labelled ({rule}): {len(unrated)} graded passage(s) have no "
        f"parsable rating, e.g. {example}; regrade them (their grading failed) or use --label count"
    )


def frame_qrels(grades: GradeFrame, rule: LabelRule) -> Qrels:
    """One qrels line per graded passage, grade-0 passages included, in pool order."""
    return qrels_of(grades.pool, *frame_labels(grades, rule))


def qrels_of(pool: PoolIndex, entries: IntArray, labels: IntArray) -> Qrels:
    """The qrels of labelled entries (sorted positions in ``pool``): query → passage → label."""
    passages, values = [pool.passage_ids[e] for e in entries.tolist()], labels.tolist()
    # in pool order a query's passages are (almost always) one stretch of positions: add stretch by stretch
    queries = pool.entry_query[entries]
    if not len(entries):
        return {}
    starts = np.flatnonzero(np.r_[True, queries[1:] != queries[:-1]]).tolist()
    qrels: Qrels = {}
    for start, end in zip(starts, [*starts[1:], len(entries)], strict=True):
        stretch = zip(passages[start:end], values[start:end], strict=True)
        qrels.setdefault(pool.query_ids[int(queries[start])], {}).update(stretch)
    return qrels


def derive_qrels(graded: GradedPool, rule: LabelRule) -> Qrels:
    """``frame_qrels`` on the dict form."""
    return frame_qrels(GradeFrame.from_graded(graded), rule)


def format_qrels(qrels: Qrels) -> str:
    """TREC qrels text: ``qid 0 docno grade`` per line."""
    return "".join(
        f"{query_id} 0 {passage_id} {grade}\n" for query_id, docs in qrels.items() for passage_id, grade in docs.items()
    )
