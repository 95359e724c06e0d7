"""Oversight analyses over stored grades (spec §3): tables for the CLI, typed pages for the web views."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.collections import queries, snapshot
from app.collections.queries import GraderRef
from app.evaluation import oversight
from app.evaluation.formatting import Table
from app.evaluation.types import GradedPool
from app.leaderboards.service import LeaderboardRequest, load_evaluation_data
from app.models import Collection
from app.oversight.impact import question_impact
from app.rubrics.service import latest_version

PER_PAGE = 50  # rows per web page; with CELL_CHARS this keeps a page well under 1 MB
CELL_CHARS = 2_000  # a longer cell (answers, passage text) is cut on the web page
MAX_PAGE = 1_000_000
GRADE = (-1, 5)  # a rating filter: -1 = no rating, else the self-rating
FILTER_CHARS = 200  # the longest query / item id a filter accepts


def _context(
    session: Session, collection: Collection, model: str | None, prompt_class: str | None, grader_id: int | None = None
) -> tuple[GraderRef, queries.PoolKeys, GradedPool]:
    data = load_evaluation_data(session, collection, model=model, prompt_class=prompt_class, grader_id=grader_id)
    return data.grader, data.pool, data.graded


def _answers(
    session: Session,
    collection: Collection,
    pool: queries.PoolKeys,
    grader: GraderRef,
    model: str | None,
    answer_prompt_class: str | None,
) -> dict[str, dict[str, dict[str, list[str]]]]:
    """Answers of the extraction grader when one is named, else the rating grader's own answers."""
    grader_pk = grader.id
    if answer_prompt_class:
        grader_pk = snapshot.select_grader(session, collection, model=model, prompt_class=answer_prompt_class).id
    return queries.load_answers(session, pool, grader_pk)


def _bank(session: Session, collection: Collection) -> dict[str, list[oversight.BankEntry]]:
    return queries.load_bank(session, latest_version(session, collection))


def verify_grading_table(
    session: Session,
    collection: Collection,
    *,
    model: str | None,
    prompt_class: str | None,
    answer_prompt_class: str | None = None,
    grader_id: int | None = None,
    query_id: str | None = None,
) -> Table:
    """Answers and ratings grouped by question, highest rating first (``grader_id`` picks the grader by id).

    With ``query_id``, only that query's questions: the grades are cut before their dict form is
    built, which is most of the cost at DL size.
    """
    data = load_evaluation_data(session, collection, model=model, prompt_class=prompt_class, grader_id=grader_id)
    bank, grades = _bank(session, collection), data.grades
    if query_id is not None:
        bank = {query_id: bank.get(query_id, [])}
        grades = grades.select(np.asarray(grades.pool.entry_query[grades.entry] == _query_index(grades, query_id)))
    answers = _answers(session, collection, data.pool, data.grader, model, answer_prompt_class)
    rows: list[list[Any]] = []
    graded = grades.to_graded() if len(grades.entry) else {}  # to_graded needs at least one cell
    for question in oversight.verify_grading(bank, graded, answers):
        for row in question.rows:
            rows.append(
                [
                    question.query_id,
                    question.item.item_id,
                    question.item.text,
                    row.passage_id,
                    row.rating,
                    " | ".join(row.answers),
                ]
            )
    return Table("Verify grading", ["query", "item", "question", "passage", "rating", "answers"], rows)


def bad_questions_table(
    session: Session,
    collection: Collection,
    *,
    model: str | None,
    prompt_class: str | None,
    min_judgment: int,
    min_rating: int,
    limit: int = 20,
    grader_id: int | None = None,
) -> Table:
    """Items most often rated ≥ R on passages judged non-relevant, per query (top ``limit``)."""
    _, pool, graded = _context(session, collection, model, prompt_class, grader_id)
    judgments = queries.load_judgments(session, pool)
    items = oversight.bad_questions(
        graded, judgments, _bank(session, collection), min_judgment=min_judgment, min_rating=min_rating
    )
    per_query: dict[str, int] = {}
    rows: list[list[Any]] = []
    for item in items:
        per_query[item.query_id] = per_query.get(item.query_id, 0) + 1
        if per_query[item.query_id] <= limit:
            rows.append([item.query_id, item.item_id, item.count, item.text or ""])
    return Table(
        f"Items rated >= {min_rating} on passages judged < {min_judgment}",
        ["query", "item", "count", "text"],
        rows,
    )


def uncovered_table(
    session: Session,
    collection: Collection,
    *,
    model: str | None,
    prompt_class: str | None,
    min_judgment: int,
    min_rating: int,
    grader_id: int | None = None,
) -> Table:
    """Relevant passages without any high self-rating."""
    _, pool, graded = _context(session, collection, model, prompt_class, grader_id)
    judgments = queries.load_judgments(session, pool)
    texts = queries.load_texts(session, collection)
    passages = oversight.uncovered_passages(graded, judgments, texts, min_judgment=min_judgment, min_rating=min_rating)
    rows: list[list[Any]] = [[p.query_id, p.passage_id, p.worst_judgment, p.best_rating, p.text] for p in passages]
    return Table(
        "Relevant passages without any high self-rating",
        ["query", "passage", "worst_judgment", "best_rating", "text"],
        rows,
    )


def grid_tables(
    session: Session,
    collection: Collection,
    *,
    model: str | None,
    prompt_class: str | None,
    answer_prompt_class: str | None = None,
) -> list[Table]:
    """One passage × question table per query."""
    grader, pool, graded = _context(session, collection, model, prompt_class)
    answers = _answers(session, collection, pool, grader, model, answer_prompt_class)
    texts = queries.load_texts(session, collection)
    tables = []
    for grid in oversight.grid(_bank(session, collection), graded, answers, texts):
        columns = ["passage", "text"]
        for item in grid.items:
            columns += [f"{item.item_id} rating", f"{item.item_id} answer"]
        rows: list[list[Any]] = []
        for row in grid.rows:
            cells: list[Any] = [row.passage_id, row.text]
            for cell in row.cells:
                cells += [cell.rating, cell.answer]
            rows.append(cells)
        titles = "; ".join(f"{i.item_id}: {i.text}" for i in grid.items)
        tables.append(Table(f"Grid for query {grid.query_id}", columns, rows, footer=[titles]))
    return tables


# ---- web pages ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RowFilter:
    """Which rows a page shows: one query, one item, one grade (rating / best rating); None = any."""

    query: str | None = None
    item: str | None = None
    grade: int | None = None


@dataclass(frozen=True, slots=True)
class Page:
    """One page of an oversight table: rows ``(page − 1)·PER_PAGE`` onward of the ``total`` filtered rows."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    total: int
    page: int
    pages: int


# the column each filter reads, per table column name
_FILTER_COLUMNS = {"query": ("query",), "item": ("item",), "grade": ("rating", "best_rating")}


def page_of(table: Table, filters: RowFilter, page: int, per_page: int = PER_PAGE) -> Page:
    """The filtered rows of ``table``, page ``page`` (clamped to the last page), long cells cut."""
    rows = [row for row in table.rows if _matches(table.columns, row, filters)]
    pages = max(1, math.ceil(len(rows) / per_page))
    page = min(max(page, 1), pages)
    shown = rows[(page - 1) * per_page : page * per_page]
    return Page(
        table.title, tuple(table.columns), tuple(tuple(_cut(v) for v in row) for row in shown), len(rows), page, pages
    )


def _matches(columns: Sequence[str], row: Sequence[Any], filters: RowFilter) -> bool:
    for name, wanted in (("query", filters.query), ("item", filters.item), ("grade", filters.grade)):
        if wanted is None:
            continue
        index = next((columns.index(c) for c in _FILTER_COLUMNS[name] if c in columns), None)
        if index is not None and row[index] != wanted:
            return False
    return True


def _cut(value: Any) -> Any:
    if isinstance(value, str) and len(value) > CELL_CHARS:
        return value[: CELL_CHARS - 1] + "…"
    return value


def _query_index(grades: Any, query_id: str) -> int:
    return grades.pool.query_ids.index(query_id) if query_id in grades.pool.query_ids else -1


def impact_table(
    session: Session,
    collection: Collection,
    *,
    model: str | None,
    prompt_class: str | None,
    min_rating: int,
    query_id: str | None = None,
    grader_id: int | None = None,
) -> Table:
    """Question impact (app/oversight/impact.py) on the latest rubric version's Cover leaderboard."""
    version = latest_version(session, collection)
    request = LeaderboardRequest(
        measure="cover", min_rating=min_rating, bootstrap_samples=0, rubric_version=version.number if version else None
    )
    data = load_evaluation_data(
        session,
        collection,
        model=model,
        prompt_class=prompt_class,
        rubric_version=request.rubric_version,
        grader_id=grader_id,
    )
    texts = {(q, entry.item_id): entry.text for q, entries in _bank(session, collection).items() for entry in entries}
    rows: list[list[Any]] = [
        [
            r.query_id,
            r.item_id,
            r.text,
            f"{r.tau:.3f}" if r.tau == r.tau else "n/a",
            ", ".join(f"{c.system} {c.delta:+.3f}" for c in r.changes[:3]),
        ]
        for r in question_impact(data, request, query_id, texts=texts)
    ]
    return Table(
        f"Question impact (Cover, threshold {min_rating})",
        ["query", "item", "question", "τ without it", "largest score changes"],
        rows,
    )
