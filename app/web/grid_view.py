"""The passage × item grid of one query, as a view model: server-side filters, sorting and pagination.

Each cell carries the grader's grade (the *suggestion*, with E[grade] and confidence) next to the
judge's grade (the *response*, with who set it and when); the colour follows the response when
there is one, and a text mark always says which of the two is shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import (
    BankItem,
    Collection,
    Grade,
    GradeOverride,
    Judgment,
    Passage,
    PoolEntry,
    Query,
    RankingEntry,
    System,
)
from app.review.flags import Flag, flags
from app.review.overrides import last_set
from app.rubrics.service import latest_version, version_item_pks
from app.web.query_nav import QueryNav, neighbours

PAGE_SIZE = 50
RELEVANT = 2  # judged relevant at 2+ (TREC DL's "highly relevant"/"perfect" levels)
HIGH_GRADE = 4  # a grade that claims the passage answers the item
COMPACT_FROM = 10  # question columns from which "auto" shows numbers only

Sort = Literal["grade", "passage", "judgment", "systems", "disagree"]
SORTS: dict[Sort, str] = {
    "grade": "max grade (high first)",
    "passage": "passage id",
    "judgment": "judgment (high first)",
    "systems": "number of systems",
    "disagree": "disagreement first",
}
Compact = Literal["auto", "on", "off"]  # on: numbers only; off: answers and judges; auto: on from COMPACT_FROM
COMPACT: dict[Compact, str] = {
    "auto": f"auto (on from {COMPACT_FROM} questions)",
    "on": "on: numbers only",
    "off": "off: answers and judges",
}


@dataclass(frozen=True, slots=True)
class GridFilters:
    system: str | None = None
    judged: str = "any"  # any | judged | unjudged
    min_grade: int | None = None
    disagree: bool = False  # judged relevant but never graded high, or graded high but judged non-relevant
    page: int = 1
    sort: Sort = "grade"
    compact: Compact = "auto"

    def params(self, grader: int | None) -> dict[str, Any]:
        """Every setting but the page, as query parameters: paging and query links keep them all."""
        params: dict[str, Any] = {"system": self.system or "", "judged": self.judged, "sort": self.sort}
        params["min_grade"] = "" if self.min_grade is None else self.min_grade
        params["compact"] = self.compact
        if self.disagree:
            params["disagree"] = "true"
        if grader is not None:
            params["grader"] = grader
        return params


def _items(session: Session, collection: Collection, query: Query) -> list[BankItem]:
    pks = version_item_pks(session, latest_version(session, collection))
    found = {
        i.id: i for i in session.scalars(select(BankItem).where(BankItem.id.in_(pks), BankItem.query_pk == query.id))
    }
    return [found[pk] for pk in pks if pk in found]


def _about(model: int | None, expected: float | None, confidence: float | None, grade: Grade | None) -> str:
    """The grader's side of a cell in words (its title; the page appends the judge's side)."""
    about = f"model {model if model is not None else 'not graded'}"
    if expected is not None:
        about += f" (E {expected:.1f}" + (f", p {confidence:.2f})" if confidence is not None else ")")
    if grade is not None and grade.error:
        about += f" · grader error: {grade.error}"
    answer = (grade.extracted_answer or grade.raw_answer or "") if grade is not None else ""
    return about + (f" · answer: {answer[:200]}" if answer else "")


def _cell(grade: Grade | None, override: GradeOverride | None) -> dict[str, Any]:
    model = grade.self_rating if grade is not None else None
    confidence = max(grade.probabilities.values()) if grade is not None and grade.probabilities else None
    shown = override.rating if override is not None else model
    expected = grade.expected_grade if grade is not None else None
    return {
        "about": _about(model, expected, confidence, grade),
        "model": model,
        "shown": shown,
        "css": f"g{shown}" if shown is not None else "gnone",
        "expected": expected,
        "confidence": confidence,
        "answer": (grade.extracted_answer or grade.raw_answer or "") if grade is not None else "",
        "error": grade.error if grade is not None else None,
        "override": {"rating": override.rating, "judge": override.judge, "at": last_set(override.updated_at)}
        if override is not None
        else None,
    }


def _column(number: int, item: BankItem, flag: Flag | None) -> dict[str, Any]:
    return {
        "number": number,
        "item_id": item.item_id,
        "text": item.text,
        "flag": {"by": flag.flagged_by, "at": flag.at, "reason": flag.reason} if flag is not None else None,
    }


def disagrees(judgment: int | None, max_grade: int | None) -> bool:
    """Judged relevant but never graded high, or graded high but judged non-relevant."""
    if judgment is None or max_grade is None:
        return False
    return (judgment >= RELEVANT) != (max_grade >= HIGH_GRADE)


def _order(rows: list[dict[str, Any]], sort: Sort) -> None:
    """Sort in place; every order ends on the passage id, so a page is stable across requests."""

    def high_first(value: int | None) -> int:
        return -(value if value is not None else -1)

    keys = {
        "grade": lambda r: (high_first(r["max_grade"]), r["passage_id"]),
        "passage": lambda r: (r["passage_id"],),
        "judgment": lambda r: (high_first(r["judgment"]), r["passage_id"]),
        "systems": lambda r: (-len(r["systems"]), r["passage_id"]),
        "disagree": lambda r: (not r["disagrees"], high_first(r["max_grade"]), r["passage_id"]),
    }
    rows.sort(key=keys[sort])


def build(
    session: Session, collection: Collection, query: Query, grader_pk: int | None, filters: GridFilters
) -> dict[str, Any]:
    """The grid of ``query`` with the grades of grader ``grader_pk`` (the route resolves it: picker or primary).

    None: nothing is graded in the collection yet, and every cell shows only judges' overrides.
    """
    items = _items(session, collection, query)
    entries = session.execute(
        select(PoolEntry.id, Passage.passage_id, Passage.text)
        .join(Passage, Passage.id == PoolEntry.passage_pk)
        .where(PoolEntry.query_pk == query.id)
        .order_by(PoolEntry.position, PoolEntry.id)
    ).all()
    # The query's pool entries as a subquery, not as a list of their ids: a few hundred parameters got
    # PostgreSQL's generic plan once psycopg prepared the statement, and a join instead let SQLite,
    # which keeps no statistics, start from every grade of the grader (5× DL: 220 and 133 ms grids).
    in_query = select(PoolEntry.id).where(PoolEntry.query_pk == query.id).scalar_subquery()
    judged: dict[int, int] = {}
    for judged_entry, relevance in session.execute(
        select(Judgment.pool_entry_pk, Judgment.relevance).where(Judgment.pool_entry_pk.in_(in_query))
    ).all():
        judged[judged_entry] = max(relevance, judged.get(judged_entry, relevance))
    systems: dict[int, list[tuple[str, int]]] = {}
    for ranked_entry, name, rank in session.execute(
        select(RankingEntry.pool_entry_pk, System.name, RankingEntry.rank)
        .join(System, System.id == RankingEntry.system_pk)
        .where(RankingEntry.pool_entry_pk.in_(in_query))
        .order_by(RankingEntry.rank, System.name)  # ties in one order on both databases
    ).all():
        systems.setdefault(ranked_entry, []).append((name, rank))
    ratings: dict[tuple[int, str], int | None] = {}
    if grader_pk:
        for entry_pk, item_id, rating in session.execute(
            select(Grade.pool_entry_pk, Grade.item_id, Grade.self_rating).where(
                Grade.grader_pk == grader_pk, Grade.pool_entry_pk.in_(in_query)
            )
        ).all():
            ratings[(entry_pk, item_id)] = rating
    overrides = {
        (o.pool_entry_pk, o.item_id): o
        for o in session.scalars(select(GradeOverride).where(GradeOverride.pool_entry_pk.in_(in_query)))
    }
    rows = []
    for entry in entries:
        shown = [
            overrides[key].rating if key in overrides else ratings.get(key)
            for key in ((entry.id, i.item_id) for i in items)
        ]
        known = [g for g in shown if g is not None]
        max_grade = max(known) if known else None
        rows.append(
            {
                "entry": entry.id,
                "passage_id": entry.passage_id,
                "text": entry.text or "",
                "judgment": judged.get(entry.id),
                "systems": systems.get(entry.id, []),
                "max_grade": max_grade,
                "disagrees": disagrees(judged.get(entry.id), max_grade),
            }
        )
    rows = [r for r in rows if _keep(r, filters)]
    _order(rows, filters.sort)
    pages = max(1, -(-len(rows) // PAGE_SIZE))
    page = min(filters.page, pages)
    shown_rows = rows[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
    _attach_cells(session, grader_pk, shown_rows, items, overrides)
    all_systems = sorted({name for names in systems.values() for name, _ in names})
    flagged = flags(session, collection)
    compact = filters.compact == "on" or (filters.compact == "auto" and len(items) >= COMPACT_FROM)
    return {
        "graded": grader_pk is not None,
        "columns": [_column(n, i, flagged.get(i.item_id)) for n, i in enumerate(items, start=1)],
        "rows": shown_rows,
        "matching": len(rows),
        "page": page,
        "pages": pages,
        "systems": all_systems,
        "compact": compact,
        "params": filters.params(grader_pk),
    }


def _attach_cells(
    session: Session,
    grader_pk: int | None,
    rows: list[dict[str, Any]],
    items: list[BankItem],
    overrides: dict[tuple[int, str], GradeOverride],
) -> None:
    """Full cell details (answers, E[grade], confidence) for the rows of the page only."""
    page_entries = [r["entry"] for r in rows]
    grades = (
        {
            (g.pool_entry_pk, g.item_id): g
            for g in session.scalars(
                select(Grade).where(Grade.grader_pk == grader_pk, Grade.pool_entry_pk.in_(page_entries))
            )
        }
        if grader_pk
        else {}
    )
    for row in rows:
        row["cells"] = [
            _cell(grades.get((row["entry"], i.item_id)), overrides.get((row["entry"], i.item_id))) for i in items
        ]


def _keep(row: dict[str, Any], filters: GridFilters) -> bool:
    if filters.system and filters.system not in {name for name, _ in row["systems"]}:
        return False
    if filters.judged == "judged" and row["judgment"] is None:
        return False
    if filters.judged == "unjudged" and row["judgment"] is not None:
        return False
    if filters.min_grade is not None and (row["max_grade"] is None or row["max_grade"] < filters.min_grade):
        return False
    return not filters.disagree or bool(row["disagrees"])


def navigation(session: Session, collection: Collection, query: Query) -> QueryNav:
    """The previous and next query (keys ``[`` and ``]``) and where this one sits: "query 3 of 43"."""
    return neighbours(session, collection, query.query_id)
