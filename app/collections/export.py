"""Exports: the upstream interchange file, qrels and TREC run files."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.collections.grades_io import direct_grades_entry, exam_grades_entry
from app.errors import Invalid
from app.models import (
    DIRECT_ITEM,
    Collection,
    Grade,
    Grader,
    Judgment,
    Passage,
    PoolEntry,
    Query,
    RankingEntry,
    System,
)


def _open_out(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "wt", encoding="utf-8")
    return path.open("w", encoding="utf-8")


def _entries_by_query(session: Session, collection: Collection) -> dict[int, list[tuple[int, Passage]]]:
    rows = session.execute(
        select(PoolEntry.query_pk, PoolEntry.id, Passage)
        .join(Passage, Passage.id == PoolEntry.passage_pk)
        .join(Query, Query.id == PoolEntry.query_pk)
        .where(Query.collection_id == collection.id)
        .order_by(PoolEntry.query_pk, PoolEntry.position)
    ).all()
    result: dict[int, list[tuple[int, Passage]]] = defaultdict(list)
    for query_pk, entry_pk, passage in rows:
        result[query_pk].append((entry_pk, passage))
    return result


def interchange_lines(session: Session, collection: Collection) -> Iterator[list[Any]]:
    """``[query_id, [paragraph, …]]`` per query, in import order, with every stored grade."""
    # Queries follow the order in which their passages were first pooled: the import file's order.
    first_pooled = (
        select(PoolEntry.query_pk, func.min(PoolEntry.id).label("first")).group_by(PoolEntry.query_pk).subquery()
    )
    queries = session.scalars(
        select(Query)
        .join(first_pooled, first_pooled.c.query_pk == Query.id)
        .where(Query.collection_id == collection.id)
        .order_by(first_pooled.c.first)
    )
    systems = dict(session.execute(select(System.id, System.name).where(System.collection_id == collection.id)).all())
    graders = {g.id: g for g in session.scalars(select(Grader))}
    entries = _entries_by_query(session, collection)
    for query in queries:
        query_entries = entries.get(query.id, [])
        if not query_entries:
            continue
        entry_pks = [pk for pk, _ in query_entries]
        rankings = _rankings(session, entry_pks)
        judgments = _judgments(session, entry_pks)
        grades = _grades(session, entry_pks)
        paragraphs = []
        for entry_pk, passage in query_entries:
            paragraph: dict[str, Any] = {"paragraph_id": passage.passage_id, "text": passage.text or ""}
            if passage.markup is not None:
                paragraph["paragraph"] = passage.markup
            paragraph["paragraph_data"] = {
                "judgments": [
                    _judgment_json(passage.passage_id, query.query_id, j) for j in judgments.get(entry_pk, [])
                ],
                "rankings": [
                    {
                        "method": systems[r.system_pk],
                        "paragraphId": passage.passage_id,
                        "queryId": query.query_id,
                        "rank": r.rank,
                        "score": r.score,
                    }
                    for r in rankings.get(entry_pk, [])
                ],
            }
            paragraph.update(_grade_entries(graders, grades.get(entry_pk, [])))
            paragraphs.append(paragraph)
        yield [query.query_id, paragraphs]


def _judgment_json(passage_id: str, query_id: str, judgment: Judgment) -> dict[str, Any]:
    result: dict[str, Any] = {"paragraphId": passage_id, "query": query_id, "relevance": judgment.relevance}
    if judgment.title_query is not None:
        result["titleQuery"] = judgment.title_query
    return result


def _rankings(session: Session, entry_pks: list[int]) -> dict[int, list[RankingEntry]]:
    rows = session.scalars(
        select(RankingEntry)
        .where(RankingEntry.pool_entry_pk.in_(entry_pks))
        .order_by(
            RankingEntry.pool_entry_pk, RankingEntry.position.is_(None), RankingEntry.position, RankingEntry.system_pk
        )
    )
    result: dict[int, list[RankingEntry]] = defaultdict(list)
    for row in rows:
        result[row.pool_entry_pk].append(row)
    return result


def _judgments(session: Session, entry_pks: list[int]) -> dict[int, list[Judgment]]:
    rows = session.scalars(
        select(Judgment).where(Judgment.pool_entry_pk.in_(entry_pks)).order_by(Judgment.pool_entry_pk, Judgment.ordinal)
    )
    result: dict[int, list[Judgment]] = defaultdict(list)
    for row in rows:
        result[row.pool_entry_pk].append(row)
    return result


def _grades(session: Session, entry_pks: list[int]) -> dict[int, list[Grade]]:
    rows = session.scalars(
        select(Grade)
        .where(Grade.pool_entry_pk.in_(entry_pks))
        .order_by(Grade.pool_entry_pk, Grade.grader_pk, Grade.position)
    )
    result: dict[int, list[Grade]] = defaultdict(list)
    for row in rows:
        result[row.pool_entry_pk].append(row)
    return result


def _grade_entries(graders: dict[int, Grader], grades: list[Grade]) -> dict[str, Any]:
    by_grader: dict[int, list[Grade]] = defaultdict(list)
    for grade in grades:
        by_grader[grade.grader_pk].append(grade)
    exam, direct = [], []
    for grader_pk, rows in by_grader.items():
        grader = graders[grader_pk]
        if rows[0].item_id == DIRECT_ITEM:
            direct.append(direct_grades_entry(grader, rows[0]))
        else:
            exam.append(exam_grades_entry(grader, rows))
    result: dict[str, Any] = {}
    if exam:
        result["exam_grades"] = exam
    if direct:
        result["grades"] = direct
    return result


def write_interchange(session: Session, collection: Collection, path: Path) -> int:
    """Write the collection as an interchange file (gzip when the name ends in .gz); returns the line count."""
    count = 0
    with _open_out(path) as handle:
        for line in interchange_lines(session, collection):
            handle.write(json.dumps(line) + "\n")
            count += 1
    return count


def write_runs(session: Session, collection: Collection, directory: Path) -> list[Path]:
    """One ``{system}.run`` per system, ordered by query then rank.

    A system name that is no plain file name (a path separator, a leading dot: ``../x`` from an
    imported report's run id) is refused before anything is written, never followed out of ``directory``.
    """
    rows = session.execute(
        select(System.name, Query.query_id, Passage.passage_id, RankingEntry.rank, RankingEntry.score)
        .join(RankingEntry, RankingEntry.system_pk == System.id)
        .join(PoolEntry, PoolEntry.id == RankingEntry.pool_entry_pk)
        .join(Query, Query.id == PoolEntry.query_pk)
        .join(Passage, Passage.id == PoolEntry.passage_pk)
        .where(System.collection_id == collection.id)
        .order_by(System.name, Query.position, RankingEntry.rank)
    ).all()
    lines: dict[str, list[str]] = defaultdict(list)
    for system, query_id, passage_id, rank, score in rows:
        lines[system].append(f"{query_id} Q0 {passage_id} {rank} {score!r} {system}\n")
    for system in lines:
        if system.startswith(".") or "/" in system or "\\" in system:
            raise Invalid(f"system {system[:60]!r} cannot name a run file in {str(directory)[:200]!r}")
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for system, text in lines.items():
        path = directory / f"{system}.run"
        path.write_text("".join(text), encoding="utf-8")
        paths.append(path)
    return paths
