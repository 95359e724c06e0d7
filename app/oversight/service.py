"""Oversight analyses over stored grades (spec §3), as tables for the CLI and, later, the web views."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.collections import queries, snapshot
from app.collections.queries import GraderRef
from app.evaluation import oversight
from app.evaluation.formatting import Table
from app.evaluation.types import GradedPool
from app.leaderboards.service import load_evaluation_data
from app.models import Collection
from app.rubrics.service import latest_version


def _context(
    session: Session, collection: Collection, model: str | None, prompt_class: str | None
) -> tuple[GraderRef, queries.PoolKeys, GradedPool]:
    data = load_evaluation_data(session, collection, model=model, prompt_class=prompt_class)
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
) -> Table:
    """Answers and ratings grouped by question, highest rating first."""
    grader, pool, graded = _context(session, collection, model, prompt_class)
    answers = _answers(session, collection, pool, grader, model, answer_prompt_class)
    rows: list[list[Any]] = []
    for question in oversight.verify_grading(_bank(session, collection), graded, answers):
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
) -> Table:
    """Items most often rated ≥ R on passages judged non-relevant, per query (top ``limit``)."""
    _, pool, graded = _context(session, collection, model, prompt_class)
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
) -> Table:
    """Relevant passages without any high self-rating."""
    _, pool, graded = _context(session, collection, model, prompt_class)
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
