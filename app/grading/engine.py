"""The grading engine: plan the cells, resolve them through the cache, grade only the misses, store.

Services take a session and never commit: ``grade_cells`` calls ``after_batch`` once each batch is
written, and the caller commits there, so an interrupted run keeps every finished batch and the
same command resumes from the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.collections.grades_io import ensure_grader
from app.collections.revision import upsert_grades
from app.config import get_settings
from app.grading.failures import NOT_SENT, ConsecutiveErrors, ErrorSummary, error_kind
from app.grading.methods import GradingMethod, Outcome, cache_key, grader_identity
from app.grading.progress import reporting
from app.grading.prompts import CellInput
from app.models import (
    DIRECT_ITEM,
    BankItem,
    Collection,
    GradeCache,
    Passage,
    PoolEntry,
    Query,
    RubricVersion,
    RubricVersionItem,
)
from app.sqlutil import chunks, upsert

OUTCOME_FIELDS = (
    "raw_answer",
    "self_rating",
    "extracted_answer",
    "correct",
    "probabilities",
    "expected_grade",
    "valid_mass",
)
BATCH_CELLS = 256
Progress = Callable[[int], None]  # cells of the running batch computed, not yet stored
GRADE_UPDATE = (*OUTCOME_FIELDS, "position", "cache_key", "error")


@dataclass(frozen=True, slots=True)
class Cell:
    """One (pool entry, bank item) pair to grade; ``item_id`` is "" for a direct prompt."""

    pool_entry_pk: int
    item_id: str
    position: int
    input: CellInput


@dataclass
class GradingReport:
    total: int = 0
    cached: int = 0  # resolved from the cache, no model call
    deduplicated: int = 0  # identical prompt already graded in the same batch
    graded: int = 0  # sent to the model
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    summary: ErrorSummary = field(default_factory=ErrorSummary)  # errors by kind
    low_mass: int = 0  # score-mode grades whose valid_mass is below score_min_valid_mass (flagged)
    not_sent: int = 0  # cells a stopped run never sent (no grade row)
    stopped: str | None = None  # why fail-fast stopped the run

    @property
    def done(self) -> int:
        return self.cached + self.deduplicated + self.graded

    def as_dict(self) -> dict[str, int]:
        return {
            "total": self.total,
            "done": self.done,
            "cached": self.cached,
            "deduplicated": self.deduplicated,
            "graded": self.graded,
            "errors": self.errors,
        }


@dataclass(frozen=True, slots=True)
class CellScope:
    """Which cells to plan: all, some queries, some items, or some pool entries (new runs)."""

    query_ids: frozenset[str] | None = None
    item_ids: frozenset[str] | None = None
    pool_entry_pks: frozenset[int] | None = None
    max_queries: int | None = None


def _queries(session: Session, collection: Collection, scope: CellScope) -> list[tuple[int, str, str]]:
    rows = session.execute(
        select(Query.id, Query.query_id, Query.text)
        .where(Query.collection_id == collection.id)
        .order_by(Query.position, Query.id)
    ).all()
    chosen = [(pk, qid, text) for pk, qid, text in rows if scope.query_ids is None or qid in scope.query_ids]
    return chosen[: scope.max_queries] if scope.max_queries is not None else chosen


def _pool(session: Session, query_pks: list[int], scope: CellScope) -> dict[int, list[tuple[int, str]]]:
    pool: dict[int, list[tuple[int, str]]] = {pk: [] for pk in query_pks}
    for batch in chunks(query_pks):
        rows = session.execute(
            select(PoolEntry.query_pk, PoolEntry.id, Passage.text)
            .join(Passage, Passage.id == PoolEntry.passage_pk)
            .where(PoolEntry.query_pk.in_(batch))
            .order_by(PoolEntry.query_pk, PoolEntry.position, PoolEntry.id)
        ).all()
        for query_pk, entry_pk, text in rows:
            if scope.pool_entry_pks is None or entry_pk in scope.pool_entry_pks:
                pool[query_pk].append((entry_pk, text or ""))
    return pool


def version_items(session: Session, version: RubricVersion, kind: str) -> dict[int, list[BankItem]]:
    """The version's items of one kind (question | nugget), per query pk, in rubric order."""
    items = session.scalars(
        select(BankItem)
        .join(RubricVersionItem, RubricVersionItem.item_pk == BankItem.id)
        .where(RubricVersionItem.version_pk == version.id, BankItem.kind == kind)
        .order_by(RubricVersionItem.position)
    )
    by_query: dict[int, list[BankItem]] = {}
    for item in items:
        by_query.setdefault(item.query_pk, []).append(item)
    return by_query


def plan_cells(
    session: Session,
    collection: Collection,
    prompt_type: str,
    version: RubricVersion | None,
    scope: CellScope = CellScope(),
) -> list[Cell]:
    """Every cell the grader must have a grade for, in query / passage / item order."""
    queries = _queries(session, collection, scope)
    pool = _pool(session, [pk for pk, _, _ in queries], scope)
    if prompt_type == "direct_grading":
        return [
            Cell(entry_pk, DIRECT_ITEM, 0, CellInput(text, "", passage))
            for pk, _, text in queries
            for entry_pk, passage in pool[pk]
        ]
    if version is None:
        return []
    items = version_items(session, version, prompt_type)
    cells = []
    for query_pk, _, query_text in queries:
        chosen = [i for i in items.get(query_pk, []) if scope.item_ids is None or i.item_id in scope.item_ids]
        for entry_pk, passage in pool[query_pk]:
            for position, item in enumerate(chosen):
                gold = tuple(str(g) for g in item.gold_answers or ())
                cells.append(Cell(entry_pk, item.item_id, position, CellInput(query_text, item.text, passage, gold)))
    return cells


def cached_keys(session: Session, keys: Iterable[str]) -> set[str]:
    """The keys among ``keys`` that the cache holds (no outcome is loaded)."""
    found: set[str] = set()
    for batch in chunks(list(set(keys))):
        found |= set(session.scalars(select(GradeCache.key).where(GradeCache.key.in_(batch))))
    return found


def _cached_outcomes(session: Session, keys: Iterable[str]) -> dict[str, Outcome]:
    found: dict[str, Outcome] = {}
    for batch in chunks(list(keys)):
        for row in session.scalars(select(GradeCache).where(GradeCache.key.in_(batch))):
            found[row.key] = Outcome(**{name: getattr(row, name) for name in OUTCOME_FIELDS})
    return found


def _cache_row(key: str, outcome: Outcome) -> dict[str, Any]:
    return {"key": key, **{name: getattr(outcome, name) for name in OUTCOME_FIELDS}}


def _grade_row(cell: Cell, grader_pk: int, key: str, outcome: Outcome) -> dict[str, Any]:
    return {
        "pool_entry_pk": cell.pool_entry_pk,
        "grader_pk": grader_pk,
        "item_id": cell.item_id,
        "position": cell.position,
        "cache_key": key,
        "error": outcome.error,
        **{name: getattr(outcome, name) for name in OUTCOME_FIELDS},
    }


def ensure_method_grader(session: Session, method: GradingMethod) -> int:
    """The grader row of the method's identity: found, or created; never one configured otherwise."""
    config = method.config()
    identity = config.identity or grader_identity(
        method.identity(),
        prompt_class=config.prompt_class,
        prompt_type=config.prompt_type,
        template_hash=config.template_hash,
    )
    return ensure_grader(
        session,
        model=config.model,
        prompt_class=config.prompt_class,
        template_hash=config.template_hash,
        prompt_type=config.prompt_type,
        is_self_rated=config.is_self_rated,
        options=config.options,
        identity=identity,
    )


@dataclass
class PreparedBatch:
    """A batch resolved against the cache (a read), waiting for its model calls."""

    cells: Sequence[Cell]
    keys: list[str]
    outcomes: dict[str, Outcome]  # cached outcomes now, fresh ones once ``compute`` ran
    fresh: dict[str, Cell]  # one cell per distinct prompt the cache misses


def prepare_batch(session: Session, method: GradingMethod, cells: Sequence[Cell]) -> PreparedBatch:
    """Read the cache for a batch; writes nothing."""
    keys = [cache_key(method, cell.input) for cell in cells]
    outcomes = _cached_outcomes(session, set(keys))
    fresh: dict[str, Cell] = {}
    for cell, key in zip(cells, keys, strict=True):
        if key not in outcomes:
            fresh.setdefault(key, cell)
    return PreparedBatch(cells, keys, outcomes, fresh)


def compute_batch(
    method: GradingMethod, prepared: PreparedBatch, progress: Progress | None = None
) -> dict[str, Outcome]:
    """The model calls of a batch: no session, so the caller holds no transaction while they run.

    ``progress(n)`` hears n, the batch's cells whose outcome is known (cached, or computed so far),
    as the backend reports its own units of work (``app/grading/progress.py``): the model batches
    are the same with or without it, and so are the outcomes. Nothing is stored yet, so n is lost
    if the process dies; the batch's end is said by its commit, not here.
    """
    if not prepared.fresh:
        return {}
    inputs = [cell.input for cell in prepared.fresh.values()]
    if progress is None:
        return dict(zip(prepared.fresh, method.grade(inputs), strict=True))
    cached = sum(1 for key in prepared.keys if key in prepared.outcomes)
    pending = len(prepared.keys) - cached
    with reporting(lambda share: progress(cached + int(pending * share))):
        results = method.grade(inputs)
    return dict(zip(prepared.fresh, results, strict=True))


def store_batch(
    session: Session, grader_pk: int, prepared: PreparedBatch, new_outcomes: dict[str, Outcome]
) -> GradingReport:
    """Write a computed batch: successful outcomes into the cache, a grade row for every cell sent (upserts).

    Only outcomes without an error are cached, so a failed cell (an error, an empty reply) is
    asked again on the next run; cells a stopped run never sent get no row at all.
    """
    report = GradingReport(total=len(prepared.cells))
    report.cached = sum(1 for key in prepared.keys if key in prepared.outcomes)
    report.graded = len(new_outcomes)
    report.deduplicated = report.total - report.cached - report.graded
    upsert(
        session,
        GradeCache,
        [_cache_row(key, outcome) for key, outcome in new_outcomes.items() if outcome.error is None],
        keys=["key"],
    )
    outcomes = {**prepared.outcomes, **new_outcomes}
    rows = [
        _grade_row(cell, grader_pk, key, outcomes[key]) for cell, key in zip(prepared.cells, prepared.keys, strict=True)
    ]
    sent = [row for row in rows if not (row["error"] and error_kind(row["error"]) == NOT_SENT)]
    upsert_grades(session, sent, update=GRADE_UPDATE)
    errors = [row["error"] for row in sent if row["error"]]
    report.not_sent = len(rows) - len(sent)
    report.graded -= sum(1 for o in new_outcomes.values() if o.error and error_kind(o.error) == NOT_SENT)
    report.deduplicated = max(0, report.total - report.cached - report.graded - report.not_sent)
    report.errors = len(errors)
    report.error_samples = errors[:3]
    report.summary = ErrorSummary.of(errors)
    threshold = get_settings().score_min_valid_mass
    report.low_mass = sum(1 for row in sent if row["valid_mass"] is not None and row["valid_mass"] < threshold)
    return report


def grade_batch(
    session: Session, method: GradingMethod, grader_pk: int, cells: Sequence[Cell], progress: Progress | None = None
) -> GradingReport:
    """Grade one batch: cache hits cost nothing, identical prompts are graded once, rows are upserted.

    ``progress`` (optional) hears how many of the batch's cells are computed but not yet stored.
    """
    prepared = prepare_batch(session, method, cells)
    return store_batch(session, grader_pk, prepared, compute_batch(method, prepared, progress))


def grade_cells(
    session: Session,
    method: GradingMethod,
    cells: Sequence[Cell],
    *,
    batch_cells: int = BATCH_CELLS,
    after_batch: Callable[[GradingReport], None] | None = None,
    max_consecutive_errors: int = 0,
) -> GradingReport:
    """Grade every cell in batches; ``after_batch`` gets the running totals (commit there).

    The grader row is written after the first batch's model calls, so with an ``after_batch``
    that commits, no write transaction is open while the model runs. Fail-fast: once
    ``max_consecutive_errors`` cells in a row (0: never) ended in the same kind of error, the run
    stops after that batch, keeping every batch written so far; ``stopped`` says why.
    """
    grader_pk: int | None = None
    total = GradingReport()
    streak = ConsecutiveErrors(max_consecutive_errors)
    for batch in chunks(cells, batch_cells):
        prepared = prepare_batch(session, method, batch)
        computed = compute_batch(method, prepared)
        grader_pk = grader_pk if grader_pk is not None else ensure_method_grader(session, method)
        report = store_batch(session, grader_pk, prepared, computed)
        _accumulate(total, report)
        outcomes = {**prepared.outcomes, **computed}
        for key in prepared.keys:
            streak.feed(outcomes[key].error)
        if after_batch is not None:
            after_batch(total)
        if streak.tripped or report.not_sent:
            total.stopped = streak.reason() if streak.tripped else _not_sent_reason(computed)
            total.not_sent += len(cells) - total.total  # the batches never started
            break
    if grader_pk is None:
        ensure_method_grader(session, method)  # an empty plan still names its grader
    return total


def _not_sent_reason(computed: dict[str, Outcome]) -> str:
    """The backend's own fail-fast tripped mid-batch: its NotSent errors carry the reason."""
    for outcome in computed.values():
        if outcome.error and error_kind(outcome.error) == NOT_SENT:
            return outcome.error.split(": ", 1)[-1]
    return "stopped"


def _accumulate(total: GradingReport, report: GradingReport) -> None:
    total.total += report.total
    total.cached += report.cached
    total.deduplicated += report.deduplicated
    total.graded += report.graded
    total.errors += report.errors
    total.error_samples = (total.error_samples + report.error_samples)[:5]
    total.summary.merge(report.summary)
    total.low_mass += report.low_mass
    total.not_sent += report.not_sent
