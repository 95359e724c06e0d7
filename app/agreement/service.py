"""Cohen's κ tables of a collection's grades against its manual judgments."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.collections import queries
from app.evaluation.agreement import AgreementTable, binary_tables, format_kappa, rating_tables
from app.evaluation.formatting import Table
from app.evaluation.frame import GradeFrame
from app.evaluation.types import GradedPool, Judgments
from app.leaderboards.service import load_evaluation_data
from app.models import Collection

MIN_ANSWERS_DEFAULT = (1, 2, 5)


def agreement_tables(
    session: Session,
    collection: Collection,
    *,
    min_answers: list[int],
    min_judgment: int,
    grader_id: int | None = None,
) -> list[AgreementTable]:
    """GRADED/MERGE/LENIENT/STRICT (self-rated) or BINARY/GRADED (boolean) tables per min-answers.

    ``grader_id``: the grader resolved at the boundary; None is the collection's primary grader.
    """
    data = load_evaluation_data(session, collection, grader_id=grader_id)
    judgments = queries.load_judgments(session, data.pool)
    return build_agreement_tables(data.grades, judgments, data.grader.is_self_rated, min_answers, min_judgment)


def build_agreement_tables(
    graded: GradedPool | GradeFrame,
    judgments: Judgments,
    is_self_rated: bool,
    min_answers: list[int],
    min_judgment: int,
) -> list[AgreementTable]:
    """The tables for already loaded grades (the snapshot's arrays, or dicts) and judgments, per min-answers value."""
    build = rating_tables if is_self_rated else binary_tables
    tables: list[AgreementTable] = []
    for m in min_answers:
        tables += build(graded, judgments, min_answers=m, min_judgment=min_judgment)
    return tables


def _set_label(values: frozenset[int]) -> str:
    return "{" + ",".join(str(v) for v in sorted(values)) + "}"


def as_table(table: AgreementTable) -> Table:
    """Rows = label sets, columns = judgment sets (TP counts), then κ and the mapped confusion counts."""
    columns = ["label", *(f"judged {_set_label(c)}" for c in table.columns), "kappa", "tp", "fp", "fn", "tn"]
    rows: list[list[Any]] = []
    for i, row in enumerate(table.rows):
        mapped = table.kappa.get(i)
        tail: list[Any] = ["", "", "", "", ""]
        if mapped is not None:
            _, kappa, stats = mapped
            tail = [format_kappa(kappa), stats.tp, stats.fp, stats.fn, stats.tn]
        rows.append([_set_label(row), *table.counts[i], *tail])
    return Table(title=f"{table.name} (min answers = {table.min_answers})", columns=columns, rows=rows)


def agreement_json(tables: list[AgreementTable]) -> list[dict[str, Any]]:
    return [
        {
            "table": t.name,
            "min_answers": t.min_answers,
            "rows": [sorted(r) for r in t.rows],
            "columns": [sorted(c) for c in t.columns],
            "counts": [list(r) for r in t.counts],
            "kappa": [
                {
                    "row": i,
                    "column": col,
                    "kappa": kappa,
                    "tp": stats.tp,
                    "fp": stats.fp,
                    "fn": stats.fn,
                    "tn": stats.tn,
                }
                for i, (col, kappa, stats) in sorted(t.kappa.items())
            ],
        }
        for t in tables
    ]
