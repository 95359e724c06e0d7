"""Collection revisions: how the in-memory evaluation snapshot learns what changed.

Every write that can change a leaderboard takes the next revision of its collection with an
``UPDATE … RETURNING`` on the collection row, inside the writer's transaction. That row lock
serialises concurrent writers, so revisions become visible in commit order: a reader that has
seen revision R has seen every row written at a revision ≤ R. Grade rows carry their collection and
the revision they were written at, so the snapshot reads only the index range
``grade.collection_id = C AND grade.revision > R``. Structural writes (queries,
pool, systems, rankings) also replace the collection's structure token, which makes the
snapshot reload everything; so must any deletion of grade rows, which no revision range can show.
Manual judgments are rewritten in place by a re-import and carry no revision: every judgment write
replaces the collection's ``judgments_token`` instead (``replace_judgments_token``), under which the
snapshot keeps the judgments it read.
Take the revision after any slow work (model calls) and just before the writes, so the row lock is
held briefly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any
from uuid import uuid4

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.models import Collection, Grade, PoolEntry, Query
from app.sqlutil import chunks, upsert

GRADE_KEY = ("grader_pk", "pool_entry_pk", "item_id")


def next_revision(session: Session, collection_id: int, *, structural: bool = False) -> int:
    """Increment and return the collection's revision; ``structural`` also replaces its structure token."""
    values: dict[str, Any] = {"revision": Collection.revision + 1}
    if structural:
        values["structure_token"] = uuid4().hex
    statement = update(Collection).where(Collection.id == collection_id).values(**values).returning(Collection.revision)
    revision = session.execute(statement.execution_options(synchronize_session=False)).scalar_one()
    return int(revision)


def replace_judgments_token(session: Session, collection_id: int) -> None:
    """Mark the collection's manual judgments as changed: kept judgments (and what they fed) are read again."""
    statement = update(Collection).where(Collection.id == collection_id).values(judgments_token=uuid4().hex)
    session.execute(statement.execution_options(synchronize_session=False))


def collection_of_entries(session: Session, entry_pks: Iterable[int]) -> dict[int, int]:
    """pool entry pk → the collection that owns it."""
    owner: dict[int, int] = {}
    for batch in chunks(sorted(set(entry_pks))):
        rows = session.execute(
            select(PoolEntry.id, Query.collection_id)
            .join(Query, Query.id == PoolEntry.query_pk)
            .where(PoolEntry.id.in_(batch))
        )
        owner.update((entry, collection) for entry, collection in rows)
    return owner


def upsert_grades(
    session: Session,
    rows: list[dict[str, Any]],
    *,
    update: Sequence[str],
    stamp: tuple[int, int] | None = None,
) -> None:
    """Upsert grade rows stamped with their collection and its next revision.

    ``stamp`` = (collection id, revision) when the caller has taken the revision already (an import).
    """
    if not rows:
        return
    if stamp is None:
        owner = collection_of_entries(session, (row["pool_entry_pk"] for row in rows))
        # in collection id order, so two writers never take the row locks in opposite orders
        revisions = {c: next_revision(session, c) for c in sorted(set(owner.values()))}
        for row in rows:
            row["collection_id"] = owner[row["pool_entry_pk"]]
            row["revision"] = revisions[row["collection_id"]]
    else:
        for row in rows:
            row["collection_id"], row["revision"] = stamp
    upsert(session, Grade, rows, keys=GRADE_KEY, update=[*update, "revision"])
