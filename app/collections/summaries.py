"""The list of collections with their sizes, read through a plain connection.

``rubric collections`` has its 0.5 s start budget (issue 16) and loading the ORM with the models costs
about 0.1 s of it, so this reads through SQLAlchemy Core's lightweight ``table()`` clauses, which need
neither. The table and column names are the models' (app/models/collection.py; a test holds them equal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import column, func, select, table

if TYPE_CHECKING:
    from sqlalchemy import Connection, ScalarSelect, TableClause

COLLECTION = table("collection", column("id"), column("name"))
# the tables counted per collection, in the listing's column order
COUNTED = tuple(table(name, column("collection_id")) for name in ("query", "passage", "system"))


def _rows_of(counted: TableClause) -> ScalarSelect[int]:
    """The number of ``counted``'s rows in the outer statement's collection (a correlated subquery)."""
    return select(func.count()).select_from(counted).where(counted.c.collection_id == COLLECTION.c.id).scalar_subquery()


def collection_summaries(connection: Connection) -> list[tuple[str, int, int, int]]:
    """(name, queries, passages, systems) per collection, by name; one statement. A session's caller
    passes ``session.connection()``."""
    statement = select(COLLECTION.c.name, *(_rows_of(counted) for counted in COUNTED)).order_by(COLLECTION.c.name)
    return [(str(name), int(q), int(p), int(s)) for name, q, p, s in connection.execute(statement)]
