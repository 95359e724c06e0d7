"""Cohen's κ between grade-derived labels and manual judgments (spec §2.6)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from app.errors import Invalid
from app.evaluation.frame import GradeFrame
from app.evaluation.qrels import LabelRule, frame_labels, passage_label
from app.evaluation.types import GradedPool, Judgments


@dataclass(frozen=True, slots=True)
class Confusion:
    """TP = predicted ∧ relevant, FP = predicted ∧ ¬relevant, FN = ¬predicted ∧ relevant, TN = neither."""

    tp: int
    fp: int
    fn: int
    tn: int

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.fn + self.tn

    def kappa(self) -> float:
        """κ = (p_o − p_e) / (1 − p_e), p_o = (TP+TN)/N,
        p_e = ((TP+FP)/N)·((TP+FN)/N) + ((FN+TN)/N)·((FP+TN)/N); 0 when p_e = 1 (or N = 0)."""
        n = self.n
        if n == 0:
            return 0.0
        p_o = (self.tp + self.tn) / n
        p_e = ((self.tp + self.fp) / n) * ((self.tp + self.fn) / n) + ((self.fn + self.tn) / n) * (
            (self.fp + self.tn) / n
        )
        if p_e == 1:
            return 0.0
        return (p_o - p_e) / (1 - p_e)


def confusion_of(predicted: npt.ArrayLike, relevant: npt.ArrayLike) -> Confusion:
    """The confusion of paired booleans (predicted_j, relevant_j), j = 1..N:

    TP = Σ_j p_j ∧ r_j,  FP = Σ_j p_j ∧ ¬r_j,  FN = Σ_j ¬p_j ∧ r_j,  TN = N − TP − FP − FN;
    its ``kappa()`` is Cohen's κ of the two labelings.
    """
    p, r = np.asarray(predicted, dtype=bool), np.asarray(relevant, dtype=bool)
    tp, fp, fn = int(np.sum(p & r)), int(np.sum(p & ~r)), int(np.sum(~p & r))
    return Confusion(tp, fp, fn, int(p.size) - tp - fp - fn)


@dataclass(frozen=True, slots=True)
class LabelledPassage:
    label: int
    judgments: tuple[int, ...]


def labelled_passages(graded: GradedPool, judgments: Judgments, rule: LabelRule) -> list[LabelledPassage]:
    """Passages with at least one judgment and a grade, with their grade-derived label."""
    result = []
    for query_id, pool in graded.items():
        judged = judgments.get(query_id, {})
        for passage_id, grade in pool.items():
            relevances = judged.get(passage_id)
            if relevances:
                result.append(LabelledPassage(passage_label(grade, rule), tuple(relevances)))
    return result


def frame_passages(grades: GradeFrame, judgments: Judgments, rule: LabelRule) -> list[LabelledPassage]:
    """``labelled_passages`` on the grade arrays: the labels of every graded passage at once (``frame_labels``)."""
    entries, labels = frame_labels(grades, rule)
    pool = grades.pool
    result = []
    for entry, label in zip(entries.tolist(), labels.tolist(), strict=True):
        relevances = judgments.get(pool.query_ids[int(pool.entry_query[entry])], {}).get(pool.passage_ids[entry])
        if relevances:
            result.append(LabelledPassage(int(label), tuple(relevances)))
    return result


def _passages(graded: GradedPool | GradeFrame, judgments: Judgments, rule: LabelRule) -> list[LabelledPassage]:
    if isinstance(graded, GradeFrame):
        return frame_passages(graded, judgments, rule)
    return labelled_passages(graded, judgments, rule)


def confusion(passages: Iterable[LabelledPassage], labels: frozenset[int], relevances: frozenset[int]) -> Confusion:
    """predict = label ∈ ``labels``; truth = any judgment ∈ ``relevances``."""
    tp = fp = fn = tn = 0
    for passage in passages:
        predicted = passage.label in labels
        truth = any(r in relevances for r in passage.judgments)
        if predicted and truth:
            tp += 1
        elif predicted:
            fp += 1
        elif truth:
            fn += 1
        else:
            tn += 1
    return Confusion(tp, fp, fn, tn)


@dataclass(frozen=True, slots=True)
class AgreementTable:
    """Rows are label sets, columns judgment sets; cell = TP count; κ on the mapped (row, column) pairs."""

    name: str
    min_answers: int
    rows: tuple[frozenset[int], ...]
    columns: tuple[frozenset[int], ...]
    counts: tuple[tuple[int, ...], ...]
    kappa: Mapping[int, tuple[int, float, Confusion]]  # row index → (column index, κ, confusion)


MIN_JUDGMENT, MAX_JUDGMENT = -2, 4  # the judgment scale is −2..3; J = 4 makes nothing relevant


def judgment_sets(min_judgment: int) -> tuple[frozenset[int], frozenset[int]]:
    """relevant = {J..3}, non-relevant = {−2..J−1}, for MIN_JUDGMENT ≤ J ≤ MAX_JUDGMENT (else ``Invalid``).

    The bound is checked before the sets are built, so no set is ever sized by user input.
    """
    if not MIN_JUDGMENT <= min_judgment <= MAX_JUDGMENT:
        raise Invalid(f"min_judgment must be between {MIN_JUDGMENT} and {MAX_JUDGMENT}, got {min_judgment}")
    return frozenset(range(min_judgment, 4)), frozenset(range(-2, min_judgment))


def _table(
    name: str,
    min_answers: int,
    arrays: _PassageArrays,
    rows: Sequence[frozenset[int]],
    columns: Sequence[frozenset[int]],
    mapping: Mapping[int, int],
) -> AgreementTable:
    predicted = [arrays.predicted(row) for row in rows]
    truth = [arrays.truth(col) for col in columns]
    counts = tuple(tuple(int(np.count_nonzero(p & t)) for t in truth) for p in predicted)
    kappa = {}
    for row_index, column_index in mapping.items():
        stats = confusion_of(predicted[row_index], truth[column_index])
        kappa[row_index] = (column_index, stats.kappa(), stats)
    return AgreementTable(name, min_answers, tuple(rows), tuple(columns), counts, kappa)


@dataclass(frozen=True, slots=True)
class _PassageArrays:
    """The passages as arrays, so that each (row, column) cell is two boolean masks, not a Python loop.

    ``judged[j, k]`` = passage j has a judgment equal to ``values[k]``; then
    truth_j(C) = ∃k: judged[j, k] ∧ values[k] ∈ C — the same predicate as ``confusion``'s
    ``any(r in C for r in judgments_j)`` — and predicted_j(L) = label_j ∈ L.
    """

    labels: npt.NDArray[np.int64]
    values: tuple[int, ...]
    judged: npt.NDArray[np.bool_]

    @classmethod
    def of(cls, passages: Sequence[LabelledPassage]) -> _PassageArrays:
        values = tuple(sorted({r for p in passages for r in p.judgments}))
        column = {v: k for k, v in enumerate(values)}
        judged = np.zeros((len(passages), len(values)), dtype=bool)
        rows = [j for j, p in enumerate(passages) for _ in p.judgments]
        cols = [column[r] for p in passages for r in p.judgments]
        judged[rows, cols] = True
        labels = np.fromiter((p.label for p in passages), dtype=np.int64, count=len(passages))
        return cls(labels, values, judged)

    def predicted(self, labels: frozenset[int]) -> npt.NDArray[np.bool_]:
        return np.isin(self.labels, np.fromiter(labels, dtype=np.int64, count=len(labels)))

    def truth(self, relevances: frozenset[int]) -> npt.NDArray[np.bool_]:
        chosen = np.fromiter((v in relevances for v in self.values), dtype=bool, count=len(self.values))
        return np.asarray(np.any(self.judged & chosen, axis=1), dtype=bool)


def _graded_mapping(min_judgment: int) -> tuple[list[frozenset[int]], dict[int, int]]:
    columns = [frozenset({3}), frozenset({2}), frozenset({1}), frozenset({0})]
    if min_judgment >= 2:  # DL: judgment 1 is non-relevant
        return columns, {0: 0, 1: 0, 2: 1, 3: 1, 4: 1, 5: 3}
    return columns, {0: 1, 1: 1, 2: 2, 3: 2, 4: 2, 5: 3}


def rating_tables(
    graded: GradedPool | GradeFrame, judgments: Judgments, *, min_answers: int, min_judgment: int
) -> list[AgreementTable]:
    """GRADED, MERGE, LENIENT and STRICT tables for self-rated grades (dicts or arrays) and one ``min_answers``."""
    rule = LabelRule("max") if min_answers == 1 else LabelRule("min-answers", min_answers)
    passages = _PassageArrays.of(_passages(graded, judgments, rule))
    relevant, non_relevant = judgment_sets(min_judgment)
    graded_columns, graded_map = _graded_mapping(min_judgment)
    singletons = [frozenset({g}) for g in (5, 4, 3, 2, 1, 0)]
    if min_judgment >= 2:
        merge_columns = [frozenset({3}), frozenset({2}), non_relevant]
    else:
        merge_columns = [frozenset({2, 3}), frozenset({1}), frozenset({0})]
    merge_rows = [frozenset({4, 5}), frozenset({1, 2, 3}), frozenset({0})]
    return [
        _table("GRADED", min_answers, passages, singletons, graded_columns, graded_map),
        _table("MERGE", min_answers, passages, merge_rows, merge_columns, {0: 0, 1: 1, 2: 2}),
        _table(
            "LENIENT",
            min_answers,
            passages,
            [frozenset({1, 2, 3, 4, 5}), frozenset({0})],
            [relevant, non_relevant],
            {0: 0, 1: 1},
        ),
        _table(
            "STRICT",
            min_answers,
            passages,
            [frozenset({4, 5}), frozenset({0, 1, 2, 3})],
            [relevant, non_relevant],
            {0: 0, 1: 1},
        ),
    ]


def binary_tables(
    graded: GradedPool | GradeFrame, judgments: Judgments, *, min_answers: int, min_judgment: int
) -> list[AgreementTable]:
    """BINARY and GRADED tables for boolean grades (dicts or arrays): label 1 iff ≥ ``min_answers`` items answered."""
    counted = _passages(graded, judgments, LabelRule("count"))
    passages = _PassageArrays.of([LabelledPassage(int(p.label >= min_answers), p.judgments) for p in counted])
    relevant, non_relevant = judgment_sets(min_judgment)
    rows = [frozenset({1}), frozenset({0})]
    graded_columns, _ = _graded_mapping(min_judgment)
    return [
        _table("BINARY", min_answers, passages, rows, [relevant, non_relevant], {0: 0, 1: 1}),
        _table("GRADED", min_answers, passages, rows, graded_columns, {}),
    ]


def format_kappa(value: float) -> str:
    """The reference prints κ with two significant digits (``f'{k:.2}'``)."""
    return "nan" if math.isnan(value) else f"{value:.2}"
