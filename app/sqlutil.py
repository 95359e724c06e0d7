"""Dialect-neutral bulk upserts (SQLite and PostgreSQL both speak INSERT … ON CONFLICT)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

CHUNK = 500  # stays under SQLite's bound-parameter limit for IN (…) lists


def chunks(items: Sequence[Any], size: int = CHUNK) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def upsert(
    session: Session,
    model: type[Any],
    rows: list[dict[str, Any]],
    *,
    keys: Sequence[str],
    update: Sequence[str] = (),
) -> None:
    """Insert rows; on a natural-key conflict update ``update`` columns (or leave the row alone)."""
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    statement = _upsert_statement(dialect, model, tuple(keys), tuple(update))  # type: ignore[arg-type]
    for batch in chunks(rows, 2000):
        session.execute(statement, list(batch))


@lru_cache(maxsize=256)
def _upsert_statement(dialect: str, model: type[Any], keys: tuple[str, ...], update: tuple[str, ...]) -> Any:
    # Built once per shape: constructing ``excluded`` copies every column of the table, which
    # cost more than the insert itself when an import upserted a few rows at a time.
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = insert(model)
    if update:
        return statement.on_conflict_do_update(
            index_elements=list(keys), set_={column: statement.excluded[column] for column in update}
        )
    return statement.on_conflict_do_nothing(index_elements=list(keys))
