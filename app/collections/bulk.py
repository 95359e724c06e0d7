"""Bulk upserts for imports: plain tuples in, one statement per batch out, inside the caller's transaction.

An import writes hundreds of thousands of grade and ranking rows. Building an ORM object, or even a
Core parameter dict, per row costs more than the database's own work, so :class:`BulkUpsert` buffers
rows as tuples in the table's column order and writes a batch at a time on the session's own DBAPI
connection (so the writes share the caller's transaction, and a later error rolls them back):

- SQLite: one prepared ``INSERT … ON CONFLICT (keys) DO UPDATE`` run with ``executemany``.
- PostgreSQL: psycopg's ``COPY … FROM STDIN`` into a temporary staging table (``ON COMMIT DROP``),
  then one ``INSERT … SELECT … ON CONFLICT (keys) DO UPDATE`` into the target table. Rows the caller
  marks *fresh* (their keys cannot exist yet: they belong to pool entries this import created) are
  copied straight into the target: no staging table and no conflict check, 10% less server work.

On PostgreSQL the server's insert work (row-by-row foreign-key checks, index maintenance) is as long
as the client's parsing, so a :class:`SerialWriter` can run each batch's statements in a background
thread while the caller parses the next lines: psycopg releases the GIL while it waits on the server.
The writer and the caller share one connection and one transaction; before any other statement on
that connection the caller waits for the batch in flight (an engine event), so statements still run
in program order, and a failed batch raises in the caller and rolls the whole import back.

Values are converted by the columns' own SQLAlchemy bind processors (JSON text, SQLite timestamps),
so the rows stored are the ones a Core ``insert`` would store. The caller guarantees that one batch
holds each natural key at most once (PostgreSQL refuses to update one row twice in a statement).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from types import TracebackType
from typing import Any

from sqlalchemy import Table, event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

Processor = Callable[[Any], Any] | None
WRITER_THREAD = "bulk-writer"  # the name prefix of a SerialWriter's thread


class SerialWriter:
    """Runs write jobs on the session's connection in one background thread, in the order submitted.

    The caller hands over batches without waiting, so it can parse the next line while the server
    inserts; it waits at its next statement on the connection (an engine event), which keeps every
    statement in program order and bounds the queue to the rows of about one line. After a failed
    job the rest are skipped (the transaction is lost anyway) and the failure raises in the caller.

    Use it as a context manager around the import: on exit it starts any held jobs (on success),
    waits for the jobs in flight (raising a failure unless another error is already on its way out)
    and stops the thread, so the thread never outlives the import and the caller's commit or
    rollback finds the connection idle.
    """

    def __init__(self, session: Session) -> None:
        self._connection = session.connection()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=WRITER_THREAD)
        self._pending: list[Future[None]] = []
        self._held: list[Callable[[], None]] | None = None  # a list while holding (see hold())
        self._failed = False
        event.listen(self._connection, "before_cursor_execute", self._before_statement)

    def submit(self, job: Callable[[], None]) -> None:
        """Queue ``job`` for the writer thread (or keep it, while holding); a failure of an earlier job raises here."""
        while self._pending and self._pending[0].done():
            self._pending.pop(0).result()  # an early failure raises at once; the list stays short
        if self._held is not None:
            self._held.append(job)
        else:
            self._pending.append(self._pool.submit(self._run, job))

    def hold(self) -> None:
        """Keep the jobs submitted from now on until :meth:`release`: the caller's statements in between
        run before them. Only for rows that no such statement reads or writes.

        Why: a statement waits for the jobs in flight, so a job started just before the caller's next
        statement keeps the caller waiting for all of it. Held until after that statement, the job
        instead runs while the caller builds its next rows, and the server is seldom idle.
        """
        if self._held is None:
            self._held = []

    def release(self) -> None:
        """Start the held jobs, in the order submitted, and stop holding."""
        held, self._held = self._held or [], None
        for job in held:
            self.submit(job)

    def wait(self) -> None:
        """Block until every started job has finished; raise the first failure. Held jobs stay held."""
        pending, self._pending = self._pending, []
        for future in pending:
            future.result()

    def _run(self, job: Callable[[], None]) -> None:
        if self._failed:
            return  # a previous job failed: its error is the one to report
        try:
            job()
        except BaseException:
            self._failed = True
            raise

    def _before_statement(self, *_: Any) -> None:
        self.wait()

    def __enter__(self) -> SerialWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        try:
            if kind is None:
                self.release()
                self.wait()
            else:  # held jobs never start: the transaction is lost
                with suppress(Exception):  # the caller's error is the one to report; the rollback undoes both
                    self.wait()
        finally:
            event.remove(self._connection, "before_cursor_execute", self._before_statement)
            self._pool.shutdown(wait=True)


class BulkUpsert:
    """Buffered ``INSERT … ON CONFLICT (keys) DO UPDATE SET update`` of tuples in ``columns`` order."""

    def __init__(
        self,
        session: Session,
        table: Table,
        columns: Sequence[str],
        *,
        keys: Sequence[str],
        update: Sequence[str],
        batch_size: int,
        writer: SerialWriter | None = None,
    ) -> None:
        self.session = session
        self.table = table
        self.columns = tuple(columns)
        self.batch_size = max(1, batch_size)
        self.writer = writer
        self.rows: list[tuple[Any, ...]] = []
        self.fresh: list[tuple[Any, ...]] = []  # rows whose keys cannot exist yet (PostgreSQL copies them straight in)
        self.written = 0
        self.dialect = dialect = session.get_bind().dialect
        self.postgresql = dialect.name == "postgresql"
        processors: list[Processor] = [
            table.c[name].type.dialect_impl(dialect).bind_processor(dialect) for name in self.columns
        ]
        # Only columns that need converting cost a Python call per value.
        self.processors = [(i, p) for i, p in enumerate(processors) if p is not None]
        quote = dialect.identifier_preparer.quote
        self.quoted = [quote(name) for name in self.columns]
        self.target = quote(table.name)
        self.staging = quote(f"_bulk_{table.name}")
        conflict = f"ON CONFLICT ({', '.join(quote(k) for k in keys)}) DO UPDATE SET " + ", ".join(
            f"{quote(name)} = excluded.{quote(name)}" for name in update
        )
        names = ", ".join(self.quoted)
        if self.postgresql:
            self.upsert_sql = f"INSERT INTO {self.target} ({names}) SELECT {names} FROM {self.staging} {conflict}"
        else:
            marks = ", ".join("?" for _ in self.columns)
            self.upsert_sql = f"INSERT INTO {self.target} ({names}) VALUES ({marks}) {conflict}"

    def add(self, row: tuple[Any, ...]) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.batch_size:
            self.flush()

    def extend(self, rows: Sequence[tuple[Any, ...]], *, fresh: bool = False) -> None:
        """Buffer ``rows``; ``fresh``: the caller guarantees that no stored row has their keys and that
        this import gives each key once (a broken promise fails the import on the unique key, never
        merges). Only PostgreSQL uses the promise, to copy such rows without a conflict check."""
        (self.fresh if fresh and self.postgresql else self.rows).extend(rows)
        if len(self.rows) + len(self.fresh) >= self.batch_size:
            self.flush()

    def flush(self) -> None:
        """Write the buffered rows (in the caller's transaction, by the writer if there is one); empty the buffer."""
        if not self.rows and not self.fresh:
            return
        upserted, fresh = self._converted(self.rows), self._converted(self.fresh)
        self.rows, self.fresh = [], []
        self.session.flush()  # ORM rows this batch refers to (graders, queries) must exist first
        connection = self.session.connection().connection.driver_connection

        def write() -> None:
            try:
                if self.postgresql:
                    self._copy(connection, upserted, fresh)
                else:
                    connection.executemany(self.upsert_sql, upserted)  # type: ignore[union-attr]
            except self.dialect.loaded_dbapi.Error as error:
                # Raised as SQLAlchemy would, so the callers' handlers (a busy database, an old schema) apply.
                raise DBAPIError.instance(self.upsert_sql, None, error, self.dialect.loaded_dbapi.Error) from error

        if self.writer is not None:
            self.writer.submit(write)
        else:
            write()
        self.written += len(upserted) + len(fresh)

    def _converted(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        if not rows or not self.processors:
            return rows
        columns = list(zip(*rows, strict=True))  # transposed in C, converted column by column
        for index, process in self.processors:
            columns[index] = tuple(_convert_runs(columns[index], process))
        return list(zip(*columns, strict=True))

    def _copy(self, connection: Any, upserted: list[tuple[Any, ...]], fresh: list[tuple[Any, ...]]) -> None:
        names = ", ".join(self.quoted)
        with connection.cursor() as cursor:
            if fresh:
                _copy_rows(cursor, f"COPY {self.target} ({names}) FROM STDIN", fresh)
            if not upserted:
                return
            # The staging table lives until the transaction ends; a second batch reuses it emptied.
            cursor.execute(
                f"CREATE TEMP TABLE IF NOT EXISTS {self.staging} ON COMMIT DROP AS "
                f"SELECT {names} FROM {self.target} WITH NO DATA"
            )
            _copy_rows(cursor, f"COPY {self.staging} ({names}) FROM STDIN", upserted)
            cursor.execute(self.upsert_sql)
            cursor.execute(f"TRUNCATE {self.staging}")


def _copy_rows(cursor: Any, statement: str, rows: list[tuple[Any, ...]]) -> None:
    with cursor.copy(statement) as copy:
        for row in rows:
            copy.write_row(row)


@contextmanager
def serial_writer(session: Session) -> Iterator[SerialWriter | None]:
    """A :class:`SerialWriter` on the session's connection for PostgreSQL (None for SQLite, whose
    writes are CPU work in this process: a thread would only take turns with the parser)."""
    if session.get_bind().dialect.name != "postgresql":
        yield None
        return
    with SerialWriter(session) as writer:
        yield writer


def _convert_runs(values: tuple[Any, ...], process: Callable[[Any], Any]) -> Iterator[Any]:
    """``process`` of each value, called once per run of one object: most values repeat the
    previous row's (None errors, the import's one timestamp), which halves the cost of a batch."""
    last: Any = object()
    out: Any = None
    for value in values:
        if value is not last:
            last, out = value, process(value)
        yield out
