"""Test banks and rubric versions. A version is an immutable snapshot of ordered bank items."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

from app.collections.errors import ImportFormatError
from app.collections.grades_io import canonical_hash
from app.collections.readers import read_banks
from app.collections.schemas import BankIn, BankItemIn
from app.collections.service import CollectionWriter, ImportReport
from app.errors import NotFound
from app.models import BankItem, Collection, Query, RubricVersion, RubricVersionItem
from app.sqlutil import upsert


def item_id_for(query_id: str, text: str, facet_id: str | None = None) -> str:
    """New item ids are ``query_id/md5(text.strip())`` (``query_id/facet_id/md5`` with a facet)."""
    digest = hashlib.md5(text.strip().encode("utf-8")).hexdigest()
    return f"{query_id}/{facet_id}/{digest}" if facet_id else f"{query_id}/{digest}"


@dataclass(frozen=True, slots=True)
class ItemSpec:
    query_id: str
    item_id: str
    kind: str
    text: str
    gold_answers: list[str] | None
    facet_id: str | None
    info: Any
    importance: str | None = None
    weight: float | None = None
    structure: Any = None
    provenance: Any = None  # where the item came from; not content: the first import's is kept

    def content_hash(self) -> str:
        """Covers what grading and scoring read; importance, weight and structure only when set,
        so items without them keep the hashes they had before those fields existed."""
        content = [self.query_id, self.item_id, self.kind, self.text, self.gold_answers, self.facet_id, self.info]
        extra = [self.importance, self.weight, self.structure]
        return canonical_hash(content + extra if any(v is not None for v in extra) else content)


def _item_spec(bank: BankIn, raw: BankItemIn, file: str, line: int, field: str) -> ItemSpec:
    if raw.nugget_text is not None or raw.nugget_id is not None:
        kind, item_id, text = "nugget", raw.nugget_id, raw.nugget_text
    else:
        kind, item_id, text = "question", raw.question_id, raw.question_text
    if text is None or not text.strip():
        raise ImportFormatError(file, line, f"{field}.{kind}_text", "an item needs a non-empty text")
    if raw.query_id is not None and raw.query_id != bank.query_id:
        raise ImportFormatError(
            file, line, f"{field}.query_id", f"item of query {raw.query_id!r} in bank of {bank.query_id!r}"
        )
    facet = raw.facet_id or bank.facet_id
    return ItemSpec(
        query_id=bank.query_id,
        item_id=item_id or item_id_for(bank.query_id, text, facet),
        kind=kind,
        text=text,
        gold_answers=raw.gold_answers,
        facet_id=facet,
        info=raw.info,
    )


def _bank_meta(bank: BankIn) -> dict[str, Any]:
    return {
        "test_collection": bank.test_collection,
        "query_text": bank.query_text,
        "info": bank.info,
        "hash": bank.hash,
        "facet_id": bank.facet_id,
        "facet_text": bank.facet_text,
        "format": "questions" if bank.questions is not None else "items",
    }


def latest_version(session: Session, collection: Collection) -> RubricVersion | None:
    return session.scalar(
        select(RubricVersion)
        .where(RubricVersion.collection_id == collection.id, RubricVersion.status == "published")
        .order_by(RubricVersion.number.desc())
        .limit(1)
    )


def version_by_number(session: Session, collection: Collection, number: int) -> RubricVersion:
    """The collection's rubric version ``number`` (any status), else NotFound: the one lookup by number."""
    version = session.scalar(
        select(RubricVersion).where(RubricVersion.collection_id == collection.id, RubricVersion.number == number)
    )
    if version is None:
        raise NotFound(f"collection {collection.name!r} has no rubric version {number}")
    return version


def version_item_pks(session: Session, version: RubricVersion | None) -> list[int]:
    if version is None:
        return []
    return list(
        session.scalars(
            select(RubricVersionItem.item_pk)
            .where(RubricVersionItem.version_pk == version.id)
            .order_by(RubricVersionItem.position)
        )
    )


def import_banks(session: Session, collection: Collection, paths: list[Path]) -> ImportReport:
    """Import bank files into a new rubric version (none if nothing changed).

    The file's items replace the previous version's items of the same kind for the same queries;
    items of other queries and kinds carry over. Ids are kept as given, never recomputed.
    """
    writer = CollectionWriter(session, collection)
    specs: list[ItemSpec] = []
    meta: dict[str, Any] = {}
    for path in paths:
        file = str(path)
        seen: set[str] = set()
        for line, bank in read_banks(path):
            writer.ensure_query(bank.query_id, bank.query_text)
            for i, raw in enumerate(bank.items if bank.items is not None else bank.questions or []):
                field = f"{'items' if bank.items is not None else 'questions'}[{i}]"
                spec = _item_spec(bank, raw, file, line, field)
                if spec.item_id in seen:
                    raise ImportFormatError(
                        file, line, f"{field}.{spec.kind}_id", f"duplicate item id {spec.item_id!r}"
                    )
                seen.add(spec.item_id)
                specs.append(spec)
                meta[f"{spec.kind}:{bank.query_id}"] = _bank_meta(bank)
            _add_facet(session, writer.query_pks[bank.query_id], bank)
    item_pks = store_items(session, collection, writer, specs)
    new_version_if_changed(session, collection, writer, specs, item_pks, meta)
    session.flush()
    return writer.report


def _add_facet(session: Session, query_pk: int, bank: BankIn) -> None:
    if bank.facet_id is None:
        return
    query = session.get_one(Query, query_pk)
    facets = list(query.facets or [])
    if not any(f.get("facet_id") == bank.facet_id for f in facets):
        query.facets = [*facets, {"facet_id": bank.facet_id, "text": bank.facet_text}]


def store_items(session: Session, collection: Collection, writer: CollectionWriter, specs: list[ItemSpec]) -> list[int]:
    rows = [
        {
            "collection_id": collection.id,
            "query_pk": writer.query_pks[s.query_id],
            "item_id": s.item_id,
            "kind": s.kind,
            "text": s.text,
            "gold_answers": s.gold_answers,
            "facet_id": s.facet_id,
            "info": s.info,
            "importance": s.importance,
            "weight": s.weight,
            "structure": s.structure,
            "provenance": s.provenance,
            "content_hash": s.content_hash(),
        }
        for s in specs
    ]
    upsert(session, BankItem, rows, keys=("collection_id", "item_id", "content_hash"))
    stored = {
        (row.item_id, row.content_hash): row.id
        for row in session.execute(
            select(BankItem.item_id, BankItem.content_hash, BankItem.id).where(BankItem.collection_id == collection.id)
        )
    }
    return [stored[(s.item_id, s.content_hash())] for s in specs]


def new_version_if_changed(
    session: Session,
    collection: Collection,
    writer: CollectionWriter,
    specs: list[ItemSpec],
    item_pks: list[int],
    meta: dict[str, Any],
    note: str = "imported test bank",
) -> None:
    """A new published version: the imported items replace the newest version's items of their kind and query."""
    previous = latest_version(session, collection)
    replaced = {(s.kind, writer.query_pks[s.query_id]) for s in specs}
    kept: list[int] = []
    for pk in version_item_pks(session, previous):
        item = session.get_one(BankItem, pk)
        if (item.kind, item.query_pk) not in replaced:
            kept.append(pk)
    position_of_query = dict(session.execute(select(Query.id, Query.position)).all())
    kind_of = dict(session.execute(select(BankItem.id, BankItem.kind).where(BankItem.id.in_(kept + item_pks))).all())
    query_of = dict(
        session.execute(select(BankItem.id, BankItem.query_pk).where(BankItem.id.in_(kept + item_pks))).all()
    )
    merged = list(dict.fromkeys(kept + item_pks))
    ordered = sorted(
        enumerate(merged),
        key=lambda pair: (position_of_query[query_of[pair[1]]], kind_of[pair[1]] != "question", pair[0]),
    )
    new_items = [pk for _, pk in ordered]
    if new_items == version_item_pks(session, previous):
        return
    create_version(
        session,
        collection,
        new_items,
        created_by="import",
        note=note,
        bank_meta={**(previous.bank_meta if previous else {}), **meta},
    )
    writer.report.add("rubric_versions", 1)
    writer.report.add("bank_items", len(new_items))


def lock_rubric(session: Session, collection: Collection) -> None:
    """Serialise rubric writers of one collection until the caller's transaction ends.

    Invariant: every writer of a rubric version reads the newest version only after this lock,
    so a save is a compare-and-swap on the rubric: check the editor's ``expected_text`` against
    the newest version, then write, with no other writer in between. A no-op ``UPDATE`` of the
    collection row is the one lock both databases share: PostgreSQL takes the row lock, and on
    SQLite it is the transaction's first write, which takes the database's write lock (waiting
    up to the busy timeout) before any read of this transaction, so the read that follows is of
    the newest committed state. The collection row is also what ``next_revision`` locks, so the
    lock order (collection, then grades) stays the same everywhere.
    """
    session.execute(
        update(Collection)
        .where(Collection.id == collection.id)
        .values(revision=Collection.revision)
        .execution_options(synchronize_session=False)
    )


def create_version(
    session: Session,
    collection: Collection,
    item_pks: list[int],
    *,
    created_by: str,
    note: str,
    status: str = "published",
    bank_meta: dict[str, Any] | None = None,
) -> RubricVersion:
    """A new immutable rubric version listing ``item_pks`` in order, numbered after the newest one."""
    lock_rubric(session, collection)  # numbers are unique per collection: no two writers take the same one
    number = (
        session.scalar(select(func.max(RubricVersion.number)).where(RubricVersion.collection_id == collection.id)) or 0
    ) + 1
    version = RubricVersion(
        collection_id=collection.id,
        number=number,
        created_by=created_by,
        note=note,
        status=status,
        bank_meta=bank_meta or {},
    )
    session.add(version)
    session.flush()
    if item_pks:
        session.execute(
            insert(RubricVersionItem),
            [{"version_pk": version.id, "item_pk": pk, "position": i} for i, pk in enumerate(item_pks)],
        )
    return version
