"""Previous and next query of a collection, for the rubric and grid pages (keys ``[`` and ``]``)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import Collection, Query


@dataclass(frozen=True, slots=True)
class QueryNav:
    """Where a query sits in its collection's order (the import order, ``Query.position``)."""

    previous: str | None
    next: str | None
    number: int  # 1-based position of the current query
    total: int


def neighbours(session: Session, collection: Collection, query_id: str) -> QueryNav:
    ids = list(
        session.scalars(
            select(Query.query_id).where(Query.collection_id == collection.id).order_by(Query.position, Query.id)
        )
    )
    at = ids.index(query_id)  # the route has resolved the query already, so it is listed
    return QueryNav(
        ids[at - 1] if at > 0 else None,
        ids[at + 1] if at + 1 < len(ids) else None,
        at + 1,
        len(ids),
    )
