"""The grader policy: each grader's coverage of a collection, and the collection's primary grader.

Pages, exports, the grid and rubric-edit regrades all read one grader. Which one is the
collection's *primary* grader: the one an organizer set, else the most complete one (ties: the
one that wrote most recently). A grader that a partial or cancelled job left behind is thus
never the default while a more complete one exists, whichever job ran last.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from app.collections.queries import GraderRef, GraderSelectionError
from app.errors import NotFound
from app.kept import Kept
from app.models import BankItem, Collection, Grade, Grader, PoolEntry, Query, RubricVersion, RubricVersionItem
from app.models.grading import DIRECT_ITEM
from app.rubrics.service import latest_version


@dataclass(frozen=True, slots=True)
class GraderCoverage:
    """How much of the collection one grader has graded.

    ``cells_total`` is, for a rubric grader, the sum over queries of (pool entries × items of the
    newest published rubric version for that query) — without a published version, the most
    complete grader's count — and for a direct grader the number of pool entries. ``cells_graded``
    counts the grader's grade rows on those cells (errors included: the cell was attempted),
    ``queries_covered`` the queries with at least one of them. ``complete``: every cell is graded.
    """

    grader: GraderRef
    cells_graded: int
    cells_total: int
    queries_covered: int
    queries_total: int
    last_grade: int  # the newest grade row's id: "most recent" among equally complete graders

    @property
    def complete(self) -> bool:
        return self.cells_graded >= self.cells_total

    @property
    def fraction(self) -> float:
        return self.cells_graded / self.cells_total if self.cells_total else 1.0

    @property
    def label(self) -> str:
        g = self.grader
        settings = f" · {g.settings}" if g.settings else ""  # equal model and prompt class: settings tell apart
        return f"#{g.id} {g.model} / {g.prompt_class} ({g.template_hash[:8]}){settings}"

    @property
    def summary(self) -> str:
        return (
            f"{self.cells_graded:,} of {self.cells_total:,} cells, "
            f"{self.queries_covered} of {self.queries_total} queries"
        )


MAX_CACHED = 32  # coverage results kept per process (collection × revision), least recently used dropped first
_cache: Kept[tuple[int, int, str, int | None], tuple[GraderCoverage, ...]] = Kept(MAX_CACHED)


def _totals(session: Session, collection: Collection) -> tuple[int, int, int]:
    """(rubric cells, pool entries, queries with pool entries) of the newest published version."""
    entries = dict(
        session.execute(
            select(PoolEntry.query_pk, func.count())
            .join(Query, Query.id == PoolEntry.query_pk)
            .where(Query.collection_id == collection.id)
            .group_by(PoolEntry.query_pk)
        ).all()
    )
    version = latest_version(session, collection)
    items: dict[int, int] = {}
    if version is not None:
        items = dict(
            session.execute(
                select(BankItem.query_pk, func.count())
                .join(RubricVersionItem, RubricVersionItem.item_pk == BankItem.id)
                .where(RubricVersionItem.version_pk == version.id)
                .group_by(BankItem.query_pk)
            ).all()
        )
    rubric_cells = sum(n * items.get(q, 0) for q, n in entries.items())
    return rubric_cells, sum(entries.values()), len(entries)


def grader_coverage(session: Session, collection: Collection) -> list[GraderCoverage]:
    """Every grader with grades in the collection and its coverage, oldest grader first.

    One GROUP BY over the collection's grades, cached per process until the collection's revision,
    structure or newest rubric version moves (every grade write bumps the revision).
    """
    version = latest_version(session, collection)
    key = (collection.id, collection.revision, collection.structure_token, version.id if version else None)
    return list(_cache.get_or_compute(key, lambda: _coverage(session, collection, version)))


def clear() -> None:
    """Forget every cached coverage (a test's database copy reuses the seed's ids and revisions)."""
    _cache.clear()


def _coverage(session: Session, collection: Collection, version: RubricVersion | None) -> tuple[GraderCoverage, ...]:
    rubric_cells, entry_count, query_count = _totals(session, collection)
    statement = (
        select(Grade.grader_pk, func.count(), func.count(func.distinct(PoolEntry.query_pk)), func.max(Grade.id))
        .join(PoolEntry, PoolEntry.id == Grade.pool_entry_pk)
        .where(Grade.collection_id == collection.id)
        .group_by(Grade.grader_pk)
    )
    if version is not None:
        current_items = (
            select(BankItem.item_id)
            .join(RubricVersionItem, RubricVersionItem.item_pk == BankItem.id)
            .where(RubricVersionItem.version_pk == version.id)
        )
        statement = statement.where(or_(Grade.item_id == DIRECT_ITEM, Grade.item_id.in_(current_items)))
    counted = {pk: (graded, covered, last) for pk, graded, covered, last in session.execute(statement).all()}
    if version is None:  # no published rubric: the most complete grader's cells are the whole
        rubric_cells = max((graded for graded, _, _ in counted.values()), default=0)
    # graders whose every row is on an item of an older version still count, with nothing graded
    present = select(Grade.grader_pk).where(Grade.collection_id == collection.id).distinct()
    graders = session.scalars(select(Grader).where(Grader.id.in_(present)).order_by(Grader.id))
    result = []
    for grader in graders:
        graded, covered, last = counted.get(grader.id, (0, 0, 0))
        total = entry_count if grader.prompt_type == "direct_grading" else rubric_cells
        result.append(GraderCoverage(GraderRef.of(grader), graded, total, covered, query_count, last))
    return tuple(result)


def _most_complete(coverage: list[GraderCoverage]) -> GraderCoverage:
    return max(coverage, key=lambda c: (c.complete, c.fraction, c.last_grade, c.grader.id))


def primary_coverage(session: Session, collection: Collection, coverage: list[GraderCoverage]) -> GraderCoverage | None:
    """The primary grader's entry in ``coverage``: the one set on the collection, else the most complete."""
    if not coverage:
        return None
    chosen = collection.primary_grader_id
    for entry in coverage:
        if entry.grader.id == chosen:
            return entry
    return _most_complete(coverage)


def primary_grader(session: Session, collection: Collection) -> GraderRef | None:
    """The collection's primary grader (None before anything is graded)."""
    entry = primary_coverage(session, collection, grader_coverage(session, collection))
    return entry.grader if entry is not None else None


def pick(coverage: list[GraderCoverage], grader_id: int) -> GraderCoverage:
    """The entry of grader ``grader_id`` (a grader with grades in the collection), else NotFound."""
    for entry in coverage:
        if entry.grader.id == grader_id:
            return entry
    raise NotFound(f"no grader {grader_id} in this collection")


def set_primary_grader(session: Session, collection: Collection, grader_id: int | None) -> GraderRef | None:
    """Make ``grader_id`` the collection's primary grader; None goes back to "the most complete"."""
    if grader_id is None:
        collection.primary_grader_id = None
        return None
    has_grades = session.scalar(
        select(Grade.id).where(Grade.collection_id == collection.id, Grade.grader_pk == grader_id).limit(1)
    )
    grader = session.get(Grader, grader_id) if has_grades is not None else None
    if grader is None:
        raise NotFound(f"no grader {grader_id} in this collection")
    collection.primary_grader_id = grader.id
    return GraderRef.of(grader)


def resolve_grader(
    session: Session,
    collection: Collection,
    *,
    grader_id: int | None = None,
    model: str | None = None,
    prompt_class: str | None = None,
) -> GraderRef:
    """The one grader a request names, resolved once at the boundary (CLI options, web query).

    By id when given; else the graders whose model and prompt class match the filters given, which
    must be exactly one (``GraderSelectionError`` lists every candidate with its id); with no
    filter at all, the collection's primary grader. Nothing downstream re-matches strings.
    """
    settled = _settled_by_snapshot(session, collection, grader_id, model, prompt_class)
    if settled is not None:
        return settled
    coverage = grader_coverage(session, collection)
    if not coverage:
        raise NotFound(f"nothing is graded in {collection.name!r} yet: launch a grading job first")
    if grader_id is not None:
        return pick(coverage, grader_id).grader
    if model is None and prompt_class is None:
        primary = primary_coverage(session, collection, coverage)
        assert primary is not None  # coverage is not empty
        return primary.grader
    matching = [c for c in coverage if _matches(c.grader, model, prompt_class)]
    if len(matching) == 1:
        return matching[0].grader
    listing = "; ".join(f"{c.label}: {c.summary}" for c in (matching or coverage))
    if not matching:
        raise GraderSelectionError(f"no grader matches model={model} prompt-class={prompt_class}. Graders: {listing}")
    raise GraderSelectionError(
        f"{len(matching)} graders match model={model} prompt-class={prompt_class}; pick one with --grader ID: {listing}"
    )


def _settled_by_snapshot(
    session: Session, collection: Collection, grader_id: int | None, model: str | None, prompt_class: str | None
) -> GraderRef | None:
    """The grader the request names when the snapshot's grader list settles it, else None.

    The snapshot lists exactly the graders with grades in the collection (a grade deletion rebuilds
    it), so a known id, a sole match of the filters, the primary set on the collection or a sole
    grader are what the coverage rules below would pick, without their count over every grade row
    (seconds at millions of cells, once per revision). Errors and the "most complete" choice still
    go through the coverage, which names the candidates.
    """
    from app.collections import snapshot  # the snapshot's module imports this package's queries

    graders = snapshot.current(session, collection).grader_list()
    if grader_id is not None:
        return next((g for g in graders if g.id == grader_id), None)
    if model is not None or prompt_class is not None:
        matching = [g for g in graders if _matches(g, model, prompt_class)]
        return matching[0] if len(matching) == 1 else None
    primary = next((g for g in graders if g.id == collection.primary_grader_id), None)
    return primary or (graders[0] if len(graders) == 1 else None)


def _matches(grader: GraderRef, model: str | None, prompt_class: str | None) -> bool:
    return (model is None or grader.model == model) and (prompt_class is None or grader.prompt_class == prompt_class)
