"""Cohen's κ between grade-derived labels and manual judgments (spec §2.6)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from app.errors import Invalid
from app.evaluation.qrels import LabelRule, passage_label
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
    passages: Sequence[LabelledPassage],
    rows: Sequence[frozenset[int]],
    columns: Sequence[frozenset[int]],
    mapping: Mapping[int, int],
) -> AgreementTable:
    counts = tuple(tuple(confusion(passages, row, col).tp for col in columns) for row in rows)
    kappa = {}
    for row_index, column_index in mapping.items():
        stats = confusion(passages, rows[row_index], columns[column_index])
        kappa[row_index] = (column_index, stats.kappa(), stats)
    return AgreementTable(name, min_answers, tuple(rows), tuple(columns), counts, kappa)


def _graded_mapping(min_judgment: int) -> tuple[list[frozenset[int]], dict[int, int]]:
    columns = [frozenset({3}), frozenset({2}), frozenset({1}), frozenset({0})]
    if min_judgment >= 2:  # DL: judgment 1 is non-relevant
        return columns, {0: 0, 1: 0, 2: 1, 3: 1, 4: 1, 5: 3}
    return columns, {0: 1, 1: 1, 2: 2, 3: 2, 4: 2, 5: 3}


def rating_tables(
    graded: GradedPool, judgments: Judgments, *, min_answers: int, min_judgment: int
) -> list[AgreementTable]:
    """GRADED, MERGE, LENIENT and STRICT tables for self-rated grades and one ``min_answers``."""
    rule = LabelRule("max") if min_answers == 1 else LabelRule("min-answers", min_answers)
    passages = labelled_passages(graded, judgments, rule)
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
    graded: GradedPool, judgments: Judgments, *, min_answers: int, min_judgment: int
) -> list[AgreementTable]:
    """BINARY and GRADED tables for boolean grades: label 1 iff ≥ ``min_answers`` items answered."""
    counted = labelled_passages(graded, judgments, LabelRule("count"))
    passages = [LabelledPassage(int(p.label >= min_answers), p.judgments) for p in counted]
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
