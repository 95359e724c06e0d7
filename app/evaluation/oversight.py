"""Human-in-the-loop analyses of a graded test bank (spec §3)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.evaluation.types import GradedPool, Judgments

# query id → passage id → item id → extracted answers
Answers = Mapping[str, Mapping[str, Mapping[str, Sequence[str]]]]


@dataclass(frozen=True, slots=True)
class BankEntry:
    item_id: str
    text: str


# query id → items in bank order
Bank = Mapping[str, Sequence[BankEntry]]


@dataclass(frozen=True, slots=True)
class VerifyRow:
    passage_id: str
    rating: int
    answers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class VerifyQuestion:
    query_id: str
    item: BankEntry
    rows: tuple[VerifyRow, ...]


def _rating(graded: GradedPool, query_id: str, passage_id: str, item_id: str) -> int:
    grade = graded.get(query_id, {}).get(passage_id)
    return grade.ratings.get(item_id, -1) if grade is not None else -1


def verify_grading(bank: Bank, graded: GradedPool, answers: Answers) -> list[VerifyQuestion]:
    """Per question: passages with a non-empty extracted answer, by self-rating (descending, stable).

    The rating is −1 where the passage has no rating for the question. A high rating next to a
    wrong answer points at a prompt or model that needs fixing.
    """
    result = []
    for query_id, items in bank.items():
        query_answers = answers.get(query_id, {})
        for item in items:
            rows = []
            for passage_id, by_item in query_answers.items():
                texts = tuple(a for a in by_item.get(item.item_id, ()) if a)
                if texts:
                    rows.append(VerifyRow(passage_id, _rating(graded, query_id, passage_id, item.item_id), texts))
            rows.sort(key=lambda row: -row.rating)
            result.append(VerifyQuestion(query_id, item, tuple(rows)))
    return result


@dataclass(frozen=True, slots=True)
class SpuriousItem:
    query_id: str
    item_id: str
    count: int
    text: str | None


def bad_questions(
    graded: GradedPool, judgments: Judgments, bank: Bank, *, min_judgment: int, min_rating: int
) -> list[SpuriousItem]:
    """Items rated ≥ R on passages judged non-relevant (any judgment < J), most frequent first per query."""
    texts = {item.item_id: item.text for items in bank.values() for item in items}
    result = []
    for query_id, pool in graded.items():
        counts: Counter[str] = Counter()
        for passage_id, grade in pool.items():
            relevances = judgments.get(query_id, {}).get(passage_id, [])
            if any(r < min_judgment for r in relevances):
                counts.update(i for i, rating in grade.ratings.items() if rating >= min_rating)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        result += [SpuriousItem(query_id, item_id, n, texts.get(item_id)) for item_id, n in ranked]
    return result


@dataclass(frozen=True, slots=True)
class UncoveredPassage:
    query_id: str
    passage_id: str
    worst_judgment: int
    best_rating: int
    text: str


def uncovered_passages(
    graded: GradedPool,
    judgments: Judgments,
    texts: Mapping[str, str],
    *,
    min_judgment: int,
    min_rating: int,
) -> list[UncoveredPassage]:
    """Relevant passages (worst judgment ≥ J) whose best self-rating over all items is < R."""
    result = []
    for query_id, judged in judgments.items():
        pool = graded.get(query_id, {})
        for passage_id, relevances in judged.items():
            grade = pool.get(passage_id)
            if not relevances or grade is None or not grade.ratings:
                continue
            worst = min(relevances)
            best = max(grade.ratings.values())
            if worst >= min_judgment and best < min_rating:
                result.append(UncoveredPassage(query_id, passage_id, worst, best, texts.get(passage_id, "")))
    return result


@dataclass(frozen=True, slots=True)
class GridCell:
    rating: int
    answer: str


@dataclass(frozen=True, slots=True)
class GridRow:
    passage_id: str
    text: str
    cells: tuple[GridCell, ...]


@dataclass(frozen=True, slots=True)
class Grid:
    query_id: str
    items: tuple[BankEntry, ...]
    rows: tuple[GridRow, ...]


def grid(bank: Bank, graded: GradedPool, answers: Answers, texts: Mapping[str, str]) -> list[Grid]:
    """Passage × question grid per query: rating (−1 if none) and answers joined by TAB.

    Rows are sorted by the sum of their ratings over the bank's items, descending.
    """
    result = []
    for query_id, items in bank.items():
        pool = graded.get(query_id, {})
        query_answers = answers.get(query_id, {})
        rows = []
        for passage_id in pool:
            cells = tuple(
                GridCell(
                    _rating(graded, query_id, passage_id, item.item_id),
                    "\t".join(query_answers.get(passage_id, {}).get(item.item_id, ())),
                )
                for item in items
            )
            rows.append(GridRow(passage_id, texts.get(passage_id, ""), cells))
        rows.sort(key=lambda row: -sum(c.rating for c in row.cells))
        result.append(Grid(query_id, tuple(items), tuple(rows)))
    return result
