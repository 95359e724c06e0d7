"""Bulk upserts for imports: plain tuples in, one statement per batch out, inside the caller's transaction.

An import writes hundreds of thousands of grade and ranking rows. Building an ORM object, or even a
Core parameter dict, per row costs more than the database's own work, so :class:`BulkUpsert` buffers
rows as tuples in the table's column order and writes a batch at a time on the session's own DBAPI
connection (so the writes share the caller's transaction, and a later error rolls them back):

- SQLite: one prepared ``INSERT … ON CONFLICT (keys) DO UPDATE`` run with ``executemany``.
- PostgreSQL: psycopg's ``COPY … FROM STDIN`` into a temporary staging table (``ON COMMIT DROP``),
  then one ``INSERT … SELECT … ON CONFLICT (keys) DO UPDATE`` into the target table.

Values are converted by the columns' own SQLAlchemy bind processors (JSON text, SQLite timestamps),
so the rows stored are the ones a Core ``insert`` would store. The caller guarantees that one batch
holds each natural key at most once (PostgreSQL refuses to update one row twice in a statement).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Table
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

Processor = Callable[[Any], Any] | None


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
    ) -> None:
        self.session = session
        self.table = table
        self.columns = tuple(columns)
        self.batch_size = max(1, batch_size)
        self.rows: list[tuple[Any, ...]] = []
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

    def extend(self, rows: Sequence[tuple[Any, ...]]) -> None:
        self.rows.extend(rows)
        if len(self.rows) >= self.batch_size:
            self.flush()

    def flush(self) -> None:
        """Write the buffered rows (in the caller's transaction) and empty the buffer."""
        if not self.rows:
            return
        rows = self._converted(self.rows) if self.processors else self.rows
        self.session.flush()  # ORM rows this batch refers to (graders, queries) must exist first
        connection = self.session.connection().connection.driver_connection
        try:
            if self.postgresql:
                self._copy_upsert(connection, rows)
            else:
                connection.executemany(self.upsert_sql, rows)  # type: ignore[union-attr]
        except self.dialect.loaded_dbapi.Error as error:
            # Raised as SQLAlchemy would, so the callers' handlers (a busy database, an old schema) apply.
            raise DBAPIError.instance(self.upsert_sql, None, error, self.dialect.loaded_dbapi.Error) from error
        self.written += len(rows)
        self.rows = []

    def _converted(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        columns = list(zip(*rows, strict=True))  # transposed in C, converted column by column
        for index, process in self.processors:
            columns[index] = tuple(_convert_runs(columns[index], process))
        return list(zip(*columns, strict=True))

    def _copy_upsert(self, connection: Any, rows: list[tuple[Any, ...]]) -> None:
        names = ", ".join(self.quoted)
        with connection.cursor() as cursor:
            # The staging table lives until the transaction ends; a second batch reuses it emptied.
            cursor.execute(
                f"CREATE TEMP TABLE IF NOT EXISTS {self.staging} ON COMMIT DROP AS "
                f"SELECT {names} FROM {self.target} WITH NO DATA"
            )
            with cursor.copy(f"COPY {self.staging} ({names}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            cursor.execute(self.upsert_sql)
            cursor.execute(f"TRUNCATE {self.staging}")


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a large import runs, then restore it.

    Each interchange line parses into hundreds of thousands of containers (JSON, models, row
    tuples) that live just long enough to count as survivors, so the collector keeps running full
    collections over everything alive: 40% of an import's CPU. The import's objects form no
    cycles (reference counting frees them line by line), so nothing accumulates while it is paused.
    Nested or concurrent uses are safe: only the use that found it enabled enables it again.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _convert_runs(values: tuple[Any, ...], process: Callable[[Any], Any]) -> Iterator[Any]:
    """``process`` of each value, called once per run of one object: most values repeat the
    previous row's (None errors, the import's one timestamp), which halves the cost of a batch."""
    last: Any = object()
    out: Any = None
    for value in values:
        if value is not last:
            last, out = value, process(value)
        yield out
