"""Oversight analyses over stored grades (spec §3), one function per view, paged and filtered server-side.

``oversight_page`` answers every view (the web's ``bad``, ``uncovered``, ``verify``, ``impact``; the
CLI's ``rubric verify`` analyses of the same names in ``CLI_ANALYSES``) with an ``OversightPage``,
which the web renders as a table and the CLI as a table or JSON. At DL size a view reads only
what its page needs: grades and answered flags from the collection's in-memory snapshot
(app/collections/snapshot.py), then answer and passage texts for the shown rows alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.collections import queries, snapshot
from app.collections.queries import GraderRef
from app.errors import Invalid
from app.evaluation import oversight
from app.evaluation.formatting import Table
from app.evaluation.frame import NO_RATING, GradeFrame
from app.kept import Kept
from app.leaderboards.service import LeaderboardRequest, load_evaluation_data
from app.models import Collection
from app.oversight.impact import question_impact
from app.rubrics.service import latest_version

PER_PAGE = 50  # rows per web page; with CELL_CHARS this keeps a page well under 1 MB
CELL_CHARS = 2_000  # a longer cell (answers, passage text) is cut on a page
MAX_PAGE = 1_000_000
GRADE = (-1, 5)  # a rating filter: -1 = no rating, else the self-rating
FILTER_CHARS = 200  # the longest query / item id a filter accepts
SPURIOUS_PER_QUERY = 20  # the spurious view lists a query's most frequent items only

# a column's header on the web page (the CLI and its JSON keep the column names)
COLUMN_LABELS = {
    "rating": "grade",
    "worst_judgment": "worst judgment",
    "best_rating": "best grade",
    "text": "passage text",
}

# web view → CLI analysis (``rubric verify COLLECTION ANALYSIS``), one to one
CLI_ANALYSES = {"verify": "grading", "bad": "bad-questions", "uncovered": "uncovered", "impact": "impact"}
VIEWS = {analysis: view for view, analysis in CLI_ANALYSES.items()}


@dataclass(frozen=True, slots=True)
class RowFilter:
    """Which rows a page shows: one query, one item, one grade (rating / best rating); None = any."""

    query: str | None = None
    item: str | None = None
    grade: int | None = None


@dataclass(frozen=True, slots=True)
class Thresholds:
    """R: a self-rating ≥ R is high; J: a judgment ≥ J is relevant."""

    min_rating: int = 4
    min_judgment: int = 2


@dataclass(frozen=True, slots=True)
class OversightPage:
    """Rows ``(page − 1)·per_page`` onward of the ``total`` filtered rows of one view.

    ``filters`` are the ones applied (impact fills in the query it defaulted to); long cells are
    cut to CELL_CHARS on a page, never in the whole table (``per_page`` None).
    """

    view: str
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    total: int
    page: int
    pages: int
    filters: RowFilter
    thresholds: Thresholds
    grader: GraderRef

    def as_json(self) -> dict[str, Any]:
        """The page as plain JSON values (the CLI's ``--format json``, equal to what the web shows)."""
        return {
            "view": self.view,
            "analysis": CLI_ANALYSES[self.view],
            "title": self.title,
            "columns": list(self.columns),
            "rows": [list(row) for row in self.rows],
            "total": self.total,
            "page": self.page,
            "pages": self.pages,
            "filters": {"query": self.filters.query, "item": self.filters.item, "grade": self.filters.grade},
            "thresholds": {"min_rating": self.thresholds.min_rating, "min_judgment": self.thresholds.min_judgment},
            "grader": {"id": self.grader.id, "model": self.grader.model, "prompt_class": self.grader.prompt_class},
        }

    @staticmethod
    def label(column: str) -> str:
        """A column's header in words on the web page (``best_rating``: "best grade")."""
        return COLUMN_LABELS.get(column, column)

    def as_table(self, *, pager: bool = False) -> Table:
        """The rows as a table; ``pager``: with the web's "page P of N · T rows" line as its footer."""
        footer = [f"page {self.page} of {self.pages} · {self.total} rows"] if pager else []
        return Table(self.title, list(self.columns), [list(row) for row in self.rows], footer=footer)


@dataclass(frozen=True, slots=True)
class _Rows:
    """A view's filtered rows, in order, built only for the slice asked for."""

    title: str
    columns: tuple[str, ...]
    total: int
    build: Callable[[int, int], list[tuple[Any, ...]]]  # rows [start, stop)


def oversight_page(
    session: Session,
    collection: Collection,
    view: str,
    grader: GraderRef,
    *,
    thresholds: Thresholds = Thresholds(),
    filters: RowFilter = RowFilter(),
    page: int = 1,
    per_page: int | None = PER_PAGE,
    answer_grader: GraderRef | None = None,
    per_query_limit: int = SPURIOUS_PER_QUERY,
) -> OversightPage:
    """One page of a view (``per_page`` None: every row, uncut).

    ``answer_grader``: whose answers verify shows (default ``grader``); ``per_query_limit``: the
    spurious view's items per query.
    """
    if view == "impact":
        filters = RowFilter(filters.query or _first_query(session, collection), filters.item, filters.grade)
    builders = {
        "verify": lambda: _verify_rows(session, collection, grader, answer_grader or grader, filters),
        "bad": lambda: _spurious_rows(session, collection, grader, thresholds, filters, per_query_limit),
        "uncovered": lambda: _uncovered_rows(session, collection, grader, thresholds, filters),
        "impact": lambda: _impact_rows(session, collection, grader, thresholds, filters),
    }
    if view not in builders:
        raise Invalid(f"unknown view {view!r}: use {', '.join(builders)}")
    rows = builders[view]()
    if per_page is None:
        page, pages, shown = 1, 1, tuple(rows.build(0, rows.total))
    else:
        pages = max(1, math.ceil(rows.total / per_page))
        page = min(max(page, 1), pages)
        start = (page - 1) * per_page
        shown = tuple(tuple(_cut(v) for v in row) for row in rows.build(start, min(start + per_page, rows.total)))
    return OversightPage(view, rows.title, rows.columns, shown, rows.total, page, pages, filters, thresholds, grader)


def _cut(value: Any) -> Any:
    if isinstance(value, str) and len(value) > CELL_CHARS:
        return value[: CELL_CHARS - 1] + "…"
    return value


def _listed(title: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> _Rows:
    return _Rows(title, columns, len(rows), lambda start, stop: rows[start:stop])


def query_choices(session: Session, collection: Collection) -> tuple[str, ...]:
    """The pool's query ids in pool order (the query picker's options)."""
    return snapshot.current(session, collection).structure.index.query_ids


def _first_query(session: Session, collection: Collection) -> str | None:
    query_ids = query_choices(session, collection)
    return query_ids[0] if query_ids else None


def _bank(session: Session, collection: Collection) -> dict[str, list[oversight.BankEntry]]:
    return queries.load_bank(session, latest_version(session, collection))


def _entry_pks(session: Session, collection: Collection) -> list[int]:
    """Pool entry pk per snapshot entry position."""
    return list(snapshot.current(session, collection).structure.pool.keys)


def _cell_keys(entry: np.ndarray[Any, Any], item: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.asarray(entry, dtype=np.int64) << 32 | np.asarray(item, dtype=np.int64)


def _lookup(
    keys: np.ndarray[Any, Any], table_keys: np.ndarray[Any, Any], values: np.ndarray[Any, Any], missing: int
) -> Any:
    """``values`` at ``keys`` (``table_keys`` unique), ``missing`` where a key is not in the table."""
    if not len(table_keys):
        return np.full(len(keys), missing, dtype=np.int64)
    order = np.argsort(table_keys)
    sorted_keys, sorted_values = table_keys[order], values[order]
    at = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return np.where(sorted_keys[at] == keys, sorted_values[at], missing)


# ---- verify grading ------------------------------------------------------------------------


def _verify_rows(
    session: Session, collection: Collection, grader: GraderRef, answer_grader: GraderRef, filters: RowFilter
) -> _Rows:
    """Per bank question (rubric order): passages with a non-empty answer, highest rating first.

    The rating is the grader's self-rating of that passage for that question (−1 if none); ties
    keep pool order. Answers come from ``answer_grader`` (an extraction grader) when it differs.
    """
    current = snapshot.current(session, collection)
    index = current.structure.index
    entry_pks = current.structure.entry_pks
    order = _verify_order(session, collection, current, grader, answer_grader, filters)

    def build(start: int, stop: int) -> list[tuple[Any, ...]]:
        entries, items = order.entry[start:stop].tolist(), order.item[start:stop].tolist()
        cells = [(int(entry_pks[e]), order.items[i]) for e, i in zip(entries, items, strict=True)]
        texts = queries.load_answers_of(session, answer_grader.id, cells)
        rows = []
        for (entry_pk, item_id), e, r, value in zip(
            cells, entries, order.rank[start:stop].tolist(), order.rating[start:stop].tolist(), strict=True
        ):
            query_id, bank_entry = order.bank[r]
            rows.append(
                (query_id, item_id, bank_entry.text, index.passage_ids[e], value, texts.get((entry_pk, item_id), ""))
            )
        return rows

    columns = ("query", "item", "item_text", "passage", "rating", "answers")
    return _Rows("Verify grading", columns, len(order.entry), build)


@dataclass(frozen=True, slots=True)
class _VerifyOrder:
    """The verify view's rows in order, as compact arrays: entry position, answered item code, bank rank, rating."""

    items: tuple[str, ...]  # answered item code → item id
    bank: tuple[tuple[str, oversight.BankEntry], ...]  # bank rank → (query id, entry)
    entry: np.ndarray[Any, Any]
    item: np.ndarray[Any, Any]
    rank: np.ndarray[Any, Any]
    rating: np.ndarray[Any, Any]

    @property
    def nbytes(self) -> int:
        return self.entry.nbytes + self.item.nbytes + self.rank.nbytes + self.rating.nbytes


# The verify order sorts every answered cell (a million at 5× DL: most of a second), so it is kept per
# (collection, structure, revision, graders, newest rubric version, filters), bounded by bytes.
# A count bounds it too: an order that matches nothing holds no bytes, and filters are the user's to vary.
MAX_VERIFY_BYTES = 64 * 2**20
MAX_VERIFY_KEPT = 256
_verify_kept: Kept[tuple[Any, ...], _VerifyOrder] = Kept(
    MAX_VERIFY_KEPT, max_bytes=lambda: MAX_VERIFY_BYTES, size=lambda order: order.nbytes
)


def clear() -> None:
    """Forget every kept order and impact (a test's database copy reuses the seed's structure tokens)."""
    _verify_kept.clear()
    _impact_kept.clear()


def _verify_order(
    session: Session,
    collection: Collection,
    current: snapshot.CollectionSnapshot,
    grader: GraderRef,
    answer_grader: GraderRef,
    filters: RowFilter,
) -> _VerifyOrder:
    version = latest_version(session, collection)
    key = (
        snapshot.database_key(session),
        collection.id,
        current.structure.token,
        current.revision,  # read before the grades and answers: a newer revision never finds an older order
        grader.id,
        answer_grader.id,
        None if version is None else version.number,
        filters,
    )
    return _verify_kept.get_or_compute(
        key, lambda: _sorted_verify_cells(session, collection, current, grader, answer_grader, filters)
    )


def _sorted_verify_cells(
    session: Session,
    collection: Collection,
    current: snapshot.CollectionSnapshot,
    grader: GraderRef,
    answer_grader: GraderRef,
    filters: RowFilter,
) -> _VerifyOrder:
    index = current.structure.index
    grades = current.grades(session, grader.id)
    answered = snapshot.answered_cells(session, collection, answer_grader.id)
    bank = _bank(session, collection)
    # bank rank of each (query, item) pair: its position in the rubric's order
    entries = [(q, e) for q, items in bank.items() for e in items]
    query_code = {q: n for n, q in enumerate(index.query_ids)}
    item_code = {item: n for n, item in enumerate(answered.items)}
    ranked = [(r, query_code.get(q, -1), item_code.get(e.item_id, -1)) for r, (q, e) in enumerate(entries)]
    ranked = [(r, q, i) for r, q, i in ranked if q >= 0 and i >= 0]
    query_of = np.asarray(index.entry_query[answered.entry])
    rank = _lookup(
        _cell_keys(query_of, answered.item),
        _cell_keys(np.asarray([q for _, q, _ in ranked], dtype=np.int64), np.asarray([i for _, _, i in ranked])),
        np.asarray([r for r, _, _ in ranked], dtype=np.int64),
        -1,
    )
    keep = rank >= 0
    if filters.query is not None:
        keep &= query_of == query_code.get(filters.query, -1)
    if filters.item is not None:
        keep &= answered.item == item_code.get(filters.item, -1)
    cells = snapshot.AnsweredCells(answered.items, answered.entry[keep], answered.item[keep])
    rank = rank[keep]
    if filters.query is not None:  # rate only this query's cells: a fraction of the grader's
        grades = grades.select(np.asarray(index.entry_query[grades.entry] == query_code.get(filters.query, -1)))
    rating = _ratings_at(grades, cells)
    keep = np.ones(len(rank), dtype=bool) if filters.grade is None else rating == filters.grade
    entry, item, rank, rating = cells.entry[keep], cells.item[keep], rank[keep], rating[keep]
    order = np.lexsort((entry, -rating, rank))
    return _VerifyOrder(
        tuple(answered.items),
        tuple(entries),
        entry[order].astype(np.int32),
        item[order].astype(np.int32),
        rank[order].astype(np.int32),
        rating[order],
    )


def _ratings_at(grades: GradeFrame, answered: snapshot.AnsweredCells) -> np.ndarray[Any, Any]:
    """The grader's rating of each answered cell, −1 (NO_RATING) where it has none."""
    code = {item: c for c, item in enumerate(grades.items)}
    to_grade_code = np.asarray([code.get(item, -1) for item in answered.items] or [-1], dtype=np.int64)
    mapped = to_grade_code[answered.item] if len(answered.item) else np.zeros(0, dtype=np.int64)
    keys = np.where(mapped >= 0, _cell_keys(answered.entry, np.maximum(mapped, 0)), -1)
    return np.asarray(_lookup(keys, _cell_keys(grades.entry, grades.item), grades.rating, NO_RATING), dtype=np.int64)


# ---- spurious questions ----------------------------------------------------------------------


def _spurious_rows(
    session: Session,
    collection: Collection,
    grader: GraderRef,
    thresholds: Thresholds,
    filters: RowFilter,
    per_query_limit: int,
) -> _Rows:
    """Items rated ≥ R on passages judged non-relevant (any judgment < J): per query in pool order,
    the ``per_query_limit`` most frequent, most frequent first (ties by item id).

    Only the latest rubric version's items: a question removed from the rubric is no longer a
    judge's concern, whatever its old grades say (without any version, every graded item).
    """
    current = snapshot.current(session, collection)
    index = current.structure.index
    grades = current.grades(session, grader.id)
    judged, worst = snapshot.worst_judgments(session, collection)
    non_relevant = judged & (worst < thresholds.min_judgment)
    high = (grades.rating != NO_RATING) & (grades.rating >= thresholds.min_rating) & non_relevant[grades.entry]
    query = index.entry_query[grades.entry[high]]
    pairs, counts = np.unique(_cell_keys(query, grades.item[high]), return_counts=True)
    bank = _bank(session, collection)
    texts = {e.item_id: e.text for items in bank.values() for e in items}
    per_query: dict[int, list[tuple[str, int]]] = {}
    for pair, count in zip(pairs.tolist(), counts.tolist(), strict=True):
        item_id = grades.items[pair & 0xFFFFFFFF]
        if item_id in texts or not bank:
            per_query.setdefault(pair >> 32, []).append((item_id, count))
    rows: list[tuple[Any, ...]] = []
    for q in sorted(per_query):
        ranked = sorted(per_query[q], key=lambda kv: (-kv[1], kv[0]))[:per_query_limit]
        rows += [(index.query_ids[q], item_id, count, texts.get(item_id) or "") for item_id, count in ranked]
    rows = [r for r in rows if filters.query in (None, r[0]) and filters.item in (None, r[1])]
    title = f"Items rated >= {thresholds.min_rating} on passages judged < {thresholds.min_judgment}"
    return _listed(title, ("query", "item", "count", "item_text"), rows)


# ---- uncovered relevant passages -----------------------------------------------------------


def _uncovered_rows(
    session: Session, collection: Collection, grader: GraderRef, thresholds: Thresholds, filters: RowFilter
) -> _Rows:
    """Relevant passages (lowest judgment ≥ J) whose best self-rating over all items is < R.

    Only passages with at least one rating; in the order their judgments were stored (by pool
    entry, queries in the order of their first judged entry). Texts are read for the shown rows.
    """
    current = snapshot.current(session, collection)
    index = current.structure.index
    grades = current.grades(session, grader.id)
    judged, worst = snapshot.worst_judgments(session, collection)
    rated = grades.rating != NO_RATING
    best = np.full(index.n_entries, NO_RATING, dtype=np.int64)
    np.maximum.at(best, grades.entry[rated], grades.rating[rated])
    has_rating = np.zeros(index.n_entries, dtype=bool)
    has_rating[grades.entry[rated]] = True
    keep = judged & has_rating & (worst >= thresholds.min_judgment) & (best < thresholds.min_rating)
    if filters.query is not None:
        wanted = index.query_ids.index(filters.query) if filters.query in index.query_ids else -1
        keep &= index.entry_query == wanted
    if filters.grade is not None:
        keep &= best == filters.grade
    entry_pks = np.asarray(list(current.structure.pool.keys), dtype=np.int64)
    # a query's place: its first judged entry's pk (the stored order of the judgments)
    first_pk = np.full(len(index.query_ids), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_pk, index.entry_query[judged], entry_pks[judged])
    shown = np.flatnonzero(keep)
    shown = shown[np.lexsort((entry_pks[shown], first_pk[index.entry_query[shown]]))]

    def build(start: int, stop: int) -> list[tuple[Any, ...]]:
        cut = shown[start:stop].tolist()
        texts = queries.load_texts_of(session, collection, [index.passage_ids[e] for e in cut])
        return [
            (
                index.query_ids[int(index.entry_query[e])],
                index.passage_ids[e],
                int(worst[e]),
                int(best[e]),
                texts.get(index.passage_ids[e], ""),
            )
            for e in cut
        ]

    return _Rows(
        "Relevant passages without any high self-rating",
        ("query", "passage", "worst_judgment", "best_rating", "text"),
        len(shown),
        build,
    )


# ---- question impact -----------------------------------------------------------------------


def _impact_rows(
    session: Session, collection: Collection, grader: GraderRef, thresholds: Thresholds, filters: RowFilter
) -> _Rows:
    """Question impact (app/oversight/impact.py) of one query's items on the latest rubric version's
    Cover leaderboard; never the whole collection at once (seconds at DL size). Only that version's
    items are listed (a removed question's old grades are no rubric question)."""
    version = latest_version(session, collection)
    request = LeaderboardRequest(
        measure="cover",
        min_rating=thresholds.min_rating,
        bootstrap_samples=0,
        rubric_version=version.number if version else None,
    )
    title = f"Question impact (Cover, threshold {thresholds.min_rating})"
    columns = ("query", "item", "item_text", "τ without it", "largest score changes")
    if filters.query is None:
        return _listed(title, columns, [])
    current = snapshot.current(session, collection)
    key = (
        snapshot.database_key(session),
        collection.id,
        current.structure.token,
        current.revision,  # read before the grades: a newer revision never finds older rows
        grader.id,
        request.rubric_version,
        thresholds.min_rating,
        filters.query,
    )
    query = filters.query
    rows = _impact_kept.get_or_compute(
        key, lambda: _query_impact(session, collection, grader, request, version is None, query)
    )
    return _listed(title, columns, [r for r in rows if filters.item in (None, r[1])])


# One query's impact recomputes a Cover table per item over the whole collection's other columns
# (a third of a second at 5× DL): kept per (collection, structure, revision, grader, rubric version,
# threshold, query). Rows are few (a query's items), so a count bounds the memory.
MAX_IMPACT_KEPT = 256
_impact_kept: Kept[tuple[Any, ...], list[tuple[Any, ...]]] = Kept(MAX_IMPACT_KEPT)


def _query_impact(
    session: Session,
    collection: Collection,
    grader: GraderRef,
    request: LeaderboardRequest,
    unversioned: bool,
    query_id: str,
) -> list[tuple[Any, ...]]:
    """The impact rows of one query's items (of the rubric version, when there is one), lowest τ first."""
    data = load_evaluation_data(
        session, collection, model=None, prompt_class=None, rubric_version=request.rubric_version, grader_id=grader.id
    )
    bank = _bank(session, collection).get(query_id, [])
    texts = {(query_id, entry.item_id): entry.text for entry in bank}
    return [
        (
            r.query_id,
            r.item_id,
            r.text,
            f"{r.tau:.3f}" if r.tau == r.tau else "n/a",
            ", ".join(f"{c.system} {c.delta:+.3f}" for c in r.changes[:3]),
        )
        for r in question_impact(data, request, query_id, texts=texts)
        if (r.query_id, r.item_id) in texts or unversioned
    ]


# ---- the grid (CLI) ------------------------------------------------------------------------


def grid_tables(
    session: Session, collection: Collection, grader: GraderRef, *, answer_grader: GraderRef | None = None
) -> list[Table]:
    """One passage × question table per query (the whole collection: the CLI's grid)."""
    data = load_evaluation_data(session, collection, model=None, prompt_class=None, grader_id=grader.id)
    answers = queries.load_answers(session, data.pool, (answer_grader or grader).id)
    texts = queries.load_texts(session, collection)
    tables = []
    for grid in oversight.grid(_bank(session, collection), data.graded, answers, texts):
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
