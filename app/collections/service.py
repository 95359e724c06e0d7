"""Write side of collections: transactional, idempotent imports. Services flush, never commit."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from sqlalchemy import String, Table, any_, bindparam, delete, insert, select, update
from sqlalchemy import text as sql
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app import collector
from app.collections import grades_io
from app.collections.bulk import BulkUpsert, SerialWriter, serial_writer
from app.collections.errors import CollectionNotFound, ImportFormatError
from app.collections.readers import (
    InterchangeLine,
    QrelsLine,
    read_interchange,
    read_official,
    read_qrels,
    read_queries,
    read_run,
)
from app.collections.revision import GRADE_KEY, next_revision, replace_judgments_token
from app.collections.schemas import COLLECTION_NAME_MAX
from app.errors import Conflict, Invalid
from app.models import (
    Collection,
    Grade,
    Judgment,
    OfficialRank,
    Passage,
    PoolEntry,
    Query,
    RankingEntry,
    System,
)
from app.models.base import utcnow
from app.sqlutil import chunks, upsert

Progress = Callable[[int], None]
ANALYZE_AFTER_ROWS = 5000  # new passages before PostgreSQL's statistics are first refreshed by an import
# The tables, for Core statements that skip the ORM's per-row bookkeeping on bulk writes.
PASSAGE = cast(Table, Passage.__table__)
POOL_ENTRY = cast(Table, PoolEntry.__table__)


def no_progress(_: int) -> None:
    return None


@dataclass
class ImportReport:
    """What an import wrote (rows inserted or updated, per kind)."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, n: int) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + n


def get_collection(session: Session, name: str) -> Collection:
    """Load a collection by name or raise CollectionNotFound (also for a name no collection can have)."""
    if not _storable_name(name):
        raise CollectionNotFound(name)
    collection = session.scalar(select(Collection).where(Collection.name == name))
    if collection is None:
        raise CollectionNotFound(name)
    return collection


def ensure_collection(session: Session, name: str) -> Collection:
    """Load the named collection, creating it if needed; the name must fit Collection.name."""
    if not _storable_name(name):
        raise Invalid(f"a collection name is 1 to {COLLECTION_NAME_MAX} characters, without NUL")
    collection = session.scalar(select(Collection).where(Collection.name == name))
    if collection is None:
        from app.collections.naming import checked_collection_name  # a new name must be URL-safe

        # Two imports creating one new name at once: the second waits for the first and reuses its row.
        upsert(session, Collection, [{"name": checked_collection_name(name)}], keys=["name"])
        collection = session.scalars(select(Collection).where(Collection.name == name)).one()
    return collection


def _storable_name(name: str) -> bool:
    return 0 < len(name) <= COLLECTION_NAME_MAX and "\x00" not in name


def rename_collection(session: Session, old: str, new: str) -> Collection:
    """Give the collection ``old`` the name ``new``, which must follow the naming rule and be free.

    Everything else refers to a collection by id, so the row's name is all that changes. A
    concurrent rename or import that takes ``new`` first makes the unique index refuse this one.
    """
    from app.collections.naming import checked_collection_name

    collection = get_collection(session, old)
    checked_collection_name(new)
    if new == old:
        return collection
    if session.scalar(select(Collection.id).where(Collection.name == new)) is not None:
        raise Conflict(f"a collection named {new!r} exists already")
    collection.name = new
    try:
        session.flush()
    except IntegrityError as error:  # the caller's transaction rolls back on the raise
        raise Conflict(f"a collection named {new!r} exists already") from error
    return collection


class CollectionWriter:
    """Caches natural key → primary key for one collection while an import runs."""

    def __init__(self, session: Session, collection: Collection) -> None:
        self.session = session
        self.collection = collection
        self.report = ImportReport()
        rows = session.execute(
            select(Query.query_id, Query.id, Query.position).where(Query.collection_id == collection.id)
        ).all()
        self.query_pks: dict[str, int] = {r.query_id: r.id for r in rows}
        self._next_query_position = max((r.position for r in rows), default=-1) + 1
        self.system_pks: dict[str, int] = dict(
            session.execute(select(System.name, System.id).where(System.collection_id == collection.id)).all()
        )
        self._revision: int | None = None
        self._structural = False
        self._inserted_passages = self._analyzed_at = 0
        self.created_entries: set[int] = set()  # pool entries this import added: nothing refers to them yet

    # -- revisions (see app/collections/revision.py) -------------------------------------------
    def grade_stamp(self) -> tuple[int, int]:
        """(collection id, revision) that this import stamps its grade rows with; the revision is taken once."""
        if self._revision is None:
            self._revision = next_revision(self.session, self.collection.id)
        return self.collection.id, self._revision

    def structure_changed(self) -> None:
        """Queries, pool, systems or rankings changed: evaluation snapshots must reload everything."""
        if not self._structural:
            self._revision = next_revision(self.session, self.collection.id, structural=True)
            self._structural = True

    # -- queries ---------------------------------------------------------------------------
    def ensure_query(self, query_id: str, text: str | None = None) -> int:
        pk = self.query_pks.get(query_id)
        if pk is None:
            query = Query(
                collection_id=self.collection.id,
                query_id=query_id,
                text=text or "",
                position=self._next_query_position,
            )
            self.session.add(query)
            self.session.flush()
            self.structure_changed()
            self._next_query_position += 1
            self.query_pks[query_id] = pk = query.id
            self.report.add("queries", 1)
        elif text:
            result = self.session.execute(update(Query).where(Query.id == pk, Query.text == "").values(text=text))
            self.report.add("queries", result.rowcount)  # type: ignore[attr-defined]
        return pk

    def known_query(self, query_id: str, file: str, line: int) -> int:
        pk = self.query_pks.get(query_id)
        if pk is None:
            raise ImportFormatError(
                file, line, "query_id", f"query {query_id!r} is not in collection {self.collection.name!r}"
            )
        return pk

    # -- passages and pool -----------------------------------------------------------------
    def ensure_passages(
        self, texts: dict[str, str | None], file: str, lines: dict[str, int], markup: dict[str, Any] | None = None
    ) -> dict[str, int]:
        """passage id → pk; fills missing texts and refuses a different text for a stored passage.

        With ``markup`` (passage id → markup, None to clear), each passage's markup becomes the given
        one: new passages are inserted with it, so only stored ones cost an update.
        """
        ids = list(texts)
        existing: dict[str, tuple[int, str | None]] = {}
        for row in self._stored_passages(ids, Passage.text):
            existing[row.passage_id] = (row.id, row.text)
        new_rows: list[dict[str, Any]] = []
        for passage_id, text in texts.items():
            if passage_id not in existing:
                new_rows.append({"collection_id": self.collection.id, "passage_id": passage_id, "text": text})
                if markup is not None:
                    new_rows[-1]["markup"] = markup[passage_id]
                continue
            pk, stored = existing[passage_id]
            if text is None or stored == text:
                continue
            if stored is not None:
                raise ImportFormatError(
                    file,
                    lines.get(passage_id),
                    "text",
                    f"passage {passage_id!r} is already stored with a different text",
                )
            self.session.execute(update(Passage).where(Passage.id == pk).values(text=text))
            self.report.add("passages", 1)
        if markup is not None:
            _write_markup(self.session, {pk: markup[passage_id] for passage_id, (pk, _) in existing.items()})
        if new_rows:
            # Core, no ORM bookkeeping per row; RETURNING batches the rows into multi-row statements.
            inserted = self.session.execute(insert(PASSAGE).returning(PASSAGE.c.passage_id, PASSAGE.c.id), new_rows)
            for passage_id, pk in inserted:
                existing[passage_id] = (pk, None)
            self.report.add("passages", len(new_rows))
            self._keep_statistics_current(len(new_rows))
        return {passage_id: existing[passage_id][0] for passage_id in ids}

    def _keep_statistics_current(self, inserted: int) -> None:
        """Analyse the passage and pool tables each time this import has doubled them (PostgreSQL).

        A transaction's queries are planned with the statistics from before it: after a bulk insert
        the tables still look empty, and every lookup scans the whole collection (seconds per line
        at 100k passages). A few ANALYZEs per import (which see this transaction's rows) keep the
        index plans; they are transactional and roll back with the import.
        """
        if self.session.get_bind().dialect.name != "postgresql":
            return
        self._inserted_passages += inserted
        if self._inserted_passages >= max(ANALYZE_AFTER_ROWS, 2 * self._analyzed_at):
            self.session.execute(sql("ANALYZE passage, pool_entry"))
            self._analyzed_at = self._inserted_passages

    def _stored_passages(self, ids: list[str], *columns: Any) -> Iterator[Any]:
        """(passage_id, id, *columns) of the collection's stored passages among ``ids``."""
        query = select(Passage.passage_id, Passage.id, *columns).where(Passage.collection_id == self.collection.id)
        if self.session.get_bind().dialect.name == "postgresql":
            # One array parameter: a long IN list of parameters makes PostgreSQL's generic plan
            # compare every row with every id (seconds per batch once a collection is large).
            for batch in chunks(ids, 5000):
                yield from self.session.execute(
                    query.where(Passage.passage_id == any_(bindparam("ids", list(batch), type_=ARRAY(String))))
                )
            return
        for batch in chunks(ids):
            yield from self.session.execute(query.where(Passage.passage_id.in_(batch)))

    def ensure_pool(self, query_pk: int, passage_pks: list[int]) -> dict[int, int]:
        """passage pk → pool entry pk for one query; new entries go after the existing ones."""
        stored = dict(
            self.session.execute(select(PoolEntry.passage_pk, PoolEntry.id).where(PoolEntry.query_pk == query_pk)).all()
        )
        missing = [pk for pk in dict.fromkeys(passage_pks) if pk not in stored]
        if missing:
            self.structure_changed()
            start = len(stored)
            inserted = self.session.execute(
                insert(POOL_ENTRY).returning(POOL_ENTRY.c.passage_pk, POOL_ENTRY.c.id),
                [{"query_pk": query_pk, "passage_pk": pk, "position": start + i} for i, pk in enumerate(missing)],
            ).all()
            self.report.add("pool_entries", len(missing))
            stored.update(inserted)
            self.created_entries.update(pk for _, pk in inserted)
        return stored

    def ensure_system(self, name: str) -> int:
        pk = self.system_pks.get(name)
        if pk is None:
            system = System(collection_id=self.collection.id, name=name)
            self.session.add(system)
            self.session.flush()
            self.structure_changed()
            self.system_pks[name] = pk = system.id
            self.report.add("systems", 1)
        return pk

    def write_rankings(self, rows: list[dict[str, Any]]) -> None:
        if rows:
            self.structure_changed()
        upsert(
            self.session,
            RankingEntry,
            rows,
            keys=("system_pk", "pool_entry_pk"),
            update=("rank", "score", "position"),
        )
        self.report.add("rankings", len(rows))

    def replace_judgments(self, by_entry: dict[int, list[tuple[int, str | None]]]) -> None:
        """The given judgment lists become the pool entries' judgments (ordinal = list index)."""
        rows = [
            {"pool_entry_pk": entry, "ordinal": i, "relevance": rel, "title_query": title}
            for entry, judgments in by_entry.items()
            for i, (rel, title) in enumerate(judgments)
        ]
        upsert(
            self.session,
            Judgment,
            rows,
            keys=("pool_entry_pk", "ordinal"),
            update=("relevance", "title_query"),
        )
        for entry, judgments in by_entry.items():
            self.session.execute(
                delete(Judgment).where(Judgment.pool_entry_pk == entry, Judgment.ordinal >= len(judgments))
            )
        if by_entry:  # in place, no revision: the token tells kept judgments (app/collections/revision.py)
            replace_judgments_token(self.session, self.collection.id)
        self.report.add("judgments", len(rows))


# -- interchange file -------------------------------------------------------------------------


def _check_unique(ids: Iterable[str], file: str, line: int, field: str, what: str) -> None:
    seen: set[str] = set()
    for value in ids:
        if value in seen:
            raise ImportFormatError(file, line, field, f"duplicate {what} {value!r}")
        seen.add(value)


RANKING_COLUMNS = ("system_pk", "pool_entry_pk", "rank", "score", "position")


class InterchangeSink:
    """The bulk writers of one interchange import: grade and ranking rows leave in batches,
    through ``background`` (one thread, on PostgreSQL) when given."""

    def __init__(self, writer: CollectionWriter, batch_size: int, background: SerialWriter | None = None) -> None:
        session = writer.session
        self.writer = writer
        self.grades = BulkUpsert(
            session,
            cast(Table, Grade.__table__),
            grades_io.GRADE_COLUMNS,
            keys=GRADE_KEY,
            update=(*grades_io.GRADE_FIELDS, "revision"),
            batch_size=batch_size,
            writer=background,
        )
        self.rankings = BulkUpsert(
            session,
            cast(Table, RankingEntry.__table__),
            RANKING_COLUMNS,
            keys=("system_pk", "pool_entry_pk"),
            update=("rank", "score", "position"),
            batch_size=batch_size,
            writer=background,
        )
        self.background = background
        self.created_at = utcnow()
        self.graders: grades_io.GraderCache = {}

    def grade_stamp(self) -> grades_io.GradeStamp:
        collection_id, revision = self.writer.grade_stamp()
        return collection_id, revision, self.created_at

    def statements_done(self) -> None:
        """A line's statements have run: the rows of the previous line start now, and this line's rows
        wait for the next line's statements (SerialWriter.hold: a line's statements touch its own
        queries, passages, pool entries and judgments, never the grade and ranking rows held)."""
        if self.background is not None:
            self.background.release()
            self.background.hold()

    def flush(self) -> None:
        if self.background is not None:
            self.background.release()
        self.grades.flush()
        self.rankings.flush()
        self.writer.report.add("grades", self.grades.written)
        self.writer.report.add("rankings", self.rankings.written)


def _write_markup(session: Session, markup: dict[int, Any]) -> None:
    """Each passage's markup becomes the file's; a file without markup clears it in one statement per chunk."""
    given = [{"id": pk, "markup": value} for pk, value in markup.items() if value is not None]
    if given:
        session.execute(update(Passage), given)
    for batch in chunks([pk for pk, value in markup.items() if value is None]):
        session.execute(update(PASSAGE).where(Passage.id.in_(batch)).values(markup=None))


def _write_interchange_line(sink: InterchangeSink, record: InterchangeLine, file: str) -> None:
    writer = sink.writer
    _check_unique((p.paragraph_id for p in record.paragraphs), file, record.line, "paragraph_id", "paragraph id")
    query_pk = writer.ensure_query(record.query_id)
    texts: dict[str, str | None] = {p.paragraph_id: p.text for p in record.paragraphs}
    markup = {p.paragraph_id: p.paragraph for p in record.paragraphs}
    passage_pks = writer.ensure_passages(texts, file, {pid: record.line for pid in texts}, markup)
    entries = writer.ensure_pool(query_pk, [passage_pks[p.paragraph_id] for p in record.paragraphs])
    line_entries = [entries[passage_pks[p.paragraph_id]] for p in record.paragraphs]
    # The line's statements first: the grade and ranking rows built after them leave in the
    # background once the next line's statements have run (app/collections/bulk.py).
    writer.replace_judgments(
        {
            entry: [(j.relevance, j.titleQuery) for j in paragraph.paragraph_data.judgments]
            for entry, paragraph in zip(line_entries, record.paragraphs, strict=True)
            if paragraph.paragraph_data.judgments
        }
    )
    sink.statements_done()
    for index, (entry, paragraph) in enumerate(zip(line_entries, record.paragraphs, strict=True)):
        fresh = entry in writer.created_entries  # no stored row refers to it, and the file gives it once
        data = paragraph.paragraph_data
        if data.rankings:
            methods = [ranking["method"] for ranking in data.rankings]
            if len(set(methods)) != len(methods):
                where = f"paragraphs[{index}].paragraph_data.rankings"
                _check_unique(methods, file, record.line, where, "method")
            writer.structure_changed()
            systems = [writer.system_pks.get(method) or writer.ensure_system(method) for method in methods]
            sink.rankings.extend(
                [
                    (system, entry, ranking["rank"], float(ranking["score"]), position)
                    for position, (system, ranking) in enumerate(zip(systems, data.rankings, strict=True))
                ],
                fresh=fresh,
            )
        sink.grades.extend(
            grades_io.paragraph_grade_rows(
                writer.session, entry, paragraph, (file, record.line, index), sink.grade_stamp(), sink.graders
            ),
            fresh=fresh,
        )


def import_interchange(
    session: Session,
    collection: Collection,
    path: Path,
    progress: Progress = no_progress,
    *,
    batch_size: int | None = None,
) -> ImportReport:
    """Import an upstream ``[query_id, [paragraph, …]]`` file: passages, pool, rankings, judgments, grades.

    Grade and ranking rows are written in batches of ``batch_size`` (the ``import_batch_size``
    setting) by app/collections/bulk.py, in the caller's transaction: an error on a later line
    still leaves nothing written once the caller rolls back.
    """
    if batch_size is None:
        from app.config import get_settings

        batch_size = get_settings().import_batch_size
    writer = CollectionWriter(session, collection)
    seen_queries: set[str] = set()
    with collector.paused(), serial_writer(session) as background:
        sink = InterchangeSink(writer, batch_size, background)
        for record in read_interchange(path):
            if record.query_id in seen_queries:
                raise ImportFormatError(str(path), record.line, "query_id", f"duplicate query {record.query_id!r}")
            seen_queries.add(record.query_id)
            _write_interchange_line(sink, record, str(path))
            progress(len(record.paragraphs))
        sink.flush()
    session.flush()
    return writer.report


# -- queries, runs, qrels, official leaderboard -------------------------------------------------


def import_queries(session: Session, collection: Collection, path: Path) -> ImportReport:
    """Import ``{qid: text}`` (JSON) or ``qid<TAB>text`` lines; existing texts are replaced."""
    writer = CollectionWriter(session, collection)
    rows = read_queries(path)
    _check_unique((qid for _, qid, _ in rows), str(path), 0, "query_id", "query id")
    for _line, query_id, text in rows:
        pk = writer.ensure_query(query_id, text)
        changed = session.execute(update(Query).where(Query.id == pk, Query.text != text).values(text=text))
        writer.report.add("queries", changed.rowcount)  # type: ignore[attr-defined]
    session.flush()
    return writer.report


def import_run(session: Session, collection: Collection, path: Path, progress: Progress = no_progress) -> ImportReport:
    """Import one TREC run file; the system is named by the run tag (one tag per file)."""
    writer = CollectionWriter(session, collection)
    file = str(path)
    lines = list(read_run(path))
    tags = {line.tag for line in lines}
    if len(tags) > 1:
        raise ImportFormatError(file, lines[0].line, "tag", f"one run per file, found tags {sorted(tags)}")
    seen: set[tuple[str, str]] = set()
    for line in lines:
        if (line.query_id, line.passage_id) in seen:
            raise ImportFormatError(
                file, line.line, "docno", f"duplicate docno {line.passage_id!r} for query {line.query_id!r}"
            )
        seen.add((line.query_id, line.passage_id))
        writer.known_query(line.query_id, file, line.line)
    system_pk = writer.ensure_system(lines[0].tag)
    _write_ranked_lines(writer, lines, system_pk, file)
    progress(len(lines))
    session.flush()
    return writer.report


def _write_ranked_lines(writer: CollectionWriter, lines: list[Any], system_pk: int, file: str) -> None:
    first_line = {line.passage_id: line.line for line in reversed(lines)}
    passage_pks = writer.ensure_passages({line.passage_id: None for line in lines}, file, first_line)
    by_query: dict[str, list[Any]] = {}
    for line in lines:
        by_query.setdefault(line.query_id, []).append(line)
    rows = []
    for query_id, query_lines in by_query.items():
        query_pk = writer.query_pks[query_id]
        ordered = sorted(query_lines, key=lambda x: x.rank)
        entries = writer.ensure_pool(query_pk, [passage_pks[x.passage_id] for x in ordered])
        rows += [
            {
                "system_pk": system_pk,
                "pool_entry_pk": entries[passage_pks[x.passage_id]],
                "rank": x.rank,
                "score": x.score,
                "position": None,
            }
            for x in query_lines
        ]
    writer.write_rankings(rows)


def pooled_qrels(writer: CollectionWriter, path: Path) -> list[tuple[QrelsLine, int]]:
    """A qrels file's lines, each with its pool entry (pooled where missing); a passage judged twice
    for one query, or a query the collection lacks, is an error naming the file and line."""
    file = str(path)
    lines = list(read_qrels(path))
    seen: set[tuple[str, str]] = set()
    for line in lines:
        if (line.query_id, line.passage_id) in seen:
            raise ImportFormatError(
                file, line.line, "docno", f"duplicate judgment of {line.passage_id!r} for query {line.query_id!r}"
            )
        seen.add((line.query_id, line.passage_id))
        writer.known_query(line.query_id, file, line.line)
    first_line = {line.passage_id: line.line for line in reversed(lines)}
    passage_pks = writer.ensure_passages({line.passage_id: None for line in lines}, file, first_line)
    by_query: dict[str, list[QrelsLine]] = {}
    for line in lines:
        by_query.setdefault(line.query_id, []).append(line)
    pooled: list[tuple[QrelsLine, int]] = []
    for query_id, query_lines in by_query.items():
        entries = writer.ensure_pool(writer.query_pks[query_id], [passage_pks[x.passage_id] for x in query_lines])
        pooled += [(x, entries[passage_pks[x.passage_id]]) for x in query_lines]
    return pooled


def import_qrels(session: Session, collection: Collection, path: Path) -> ImportReport:
    """Import TREC qrels as each listed passage's judgment (replacing the passage's judgments)."""
    writer = CollectionWriter(session, collection)
    judgments: dict[int, list[tuple[int, str | None]]] = {
        entry: [(line.relevance, line.query_id)] for line, entry in pooled_qrels(writer, path)
    }
    writer.replace_judgments(judgments)
    session.flush()
    return writer.report


def import_official(session: Session, collection: Collection, path: Path) -> ImportReport:
    """Replace the collection's official leaderboard; every ranked system must be in the collection."""
    file = str(path)
    report = ImportReport()
    known = set(session.scalars(select(System.name).where(System.collection_id == collection.id)))
    entries = read_official(path)
    for line, system, _rank in entries:
        if system not in known:
            raise ImportFormatError(
                file, line, system, f"system {system!r} is not in collection {collection.name!r} (import its run first)"
            )
    session.execute(delete(OfficialRank).where(OfficialRank.collection_id == collection.id))
    session.execute(
        insert(OfficialRank),
        [{"collection_id": collection.id, "system_name": s, "rank": r} for _, s, r in entries],
    )
    report.add("official_ranks", len(entries))
    session.flush()
    return report


def official_leaderboard(session: Session, collection: Collection) -> dict[str, float]:
    """system → official rank, as imported."""
    rows = session.execute(
        select(OfficialRank.system_name, OfficialRank.rank).where(OfficialRank.collection_id == collection.id)
    ).all()
    return dict(rows)
