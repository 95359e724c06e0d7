"""A test collection: queries, passages, the pool, systems' rankings, judgments, official ranks."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from sqlalchemy import JSON, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, TimestampMixin


class Collection(TimestampMixin, Base):
    __tablename__ = "collection"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    # Bumped by every write that can change a leaderboard; grade rows carry the value they were written at,
    # so an in-memory evaluation snapshot reloads only newer rows (app/leaderboards/snapshot.py).
    revision: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Replaced whenever queries, the pool, systems or rankings change: the snapshot then reloads everything.
    structure_token: Mapped[str] = mapped_column(String(32), default=lambda: uuid4().hex, server_default="")
    # Replaced by every write of manual judgments, which moves neither of the two above: the snapshot keeps
    # the judgments it read under the token it saw (app/collections/snapshot.py:manual_judgments).
    judgments_token: Mapped[str] = mapped_column(String(32), default=lambda: uuid4().hex, server_default="")
    # The grader an organizer chose for pages and rubric-edit regrades; None: the most complete one
    # (app/collections/graders.py).
    primary_grader_id: Mapped[int | None] = mapped_column(
        ForeignKey("grader.id", ondelete="SET NULL"), nullable=True, default=None
    )


class Query(Base):
    __tablename__ = "query"
    __table_args__ = (UniqueConstraint("collection_id", "query_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    collection_id: Mapped[int] = mapped_column(ForeignKey("collection.id", ondelete="CASCADE"))
    query_id: Mapped[str] = mapped_column(String(200))
    text: Mapped[str] = mapped_column(Text, default="")
    # Subtopics / facets: [{"facet_id": ..., "text": ...}], as CAR-style banks name them.
    facets: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True, default=None)
    position: Mapped[int] = mapped_column(Integer, default=0)
    # The rest of an AutoJudge Request (background, problem_statement, limits, collection ids), as imported.
    info: Mapped[Any] = mapped_column(JSON, nullable=True, default=None)


class Passage(Base):
    __tablename__ = "passage"
    __table_args__ = (UniqueConstraint("collection_id", "passage_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    collection_id: Mapped[int] = mapped_column(ForeignKey("collection.id", ondelete="CASCADE"))
    passage_id: Mapped[str] = mapped_column(String(300))
    # None when a run or qrels named the passage but no text was ever imported.
    text: Mapped[str | None] = mapped_column(Text, default=None)
    markup: Mapped[Any] = mapped_column(JSON, nullable=True, default=None)


class PoolEntry(Base):
    """A passage listed for a query: the unit that is judged, ranked and graded."""

    __tablename__ = "pool_entry"
    __table_args__ = (
        UniqueConstraint("query_pk", "passage_pk"),
        Index("ix_pool_entry_passage", "passage_pk"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    query_pk: Mapped[int] = mapped_column(ForeignKey("query.id", ondelete="CASCADE"))
    passage_pk: Mapped[int] = mapped_column(ForeignKey("passage.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer, default=0)


class System(Base):
    __tablename__ = "system"
    __table_args__ = (UniqueConstraint("collection_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    collection_id: Mapped[int] = mapped_column(ForeignKey("collection.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))


class RankingEntry(Base):
    __tablename__ = "ranking_entry"
    __table_args__ = (
        UniqueConstraint("system_pk", "pool_entry_pk"),
        Index("ix_ranking_entry_pool_entry", "pool_entry_pk"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    system_pk: Mapped[int] = mapped_column(ForeignKey("system.id", ondelete="CASCADE"))
    pool_entry_pk: Mapped[int] = mapped_column(ForeignKey("pool_entry.id", ondelete="CASCADE"))
    rank: Mapped[int] = mapped_column(Integer)
    score: Mapped[float] = mapped_column(Float)
    # Order inside the interchange file's rankings list, kept for a byte-faithful export.
    position: Mapped[int | None] = mapped_column(Integer, default=None)


class Judgment(Base):
    __tablename__ = "judgment"
    __table_args__ = (UniqueConstraint("pool_entry_pk", "ordinal"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    pool_entry_pk: Mapped[int] = mapped_column(ForeignKey("pool_entry.id", ondelete="CASCADE"))
    ordinal: Mapped[int] = mapped_column(Integer, default=0)
    relevance: Mapped[int] = mapped_column(Integer)
    title_query: Mapped[str | None] = mapped_column(String(200), default=None)


class Citation(Base):
    """A response passage (a segment of a generated answer) cites a corpus document, in citation order."""

    __tablename__ = "citation"
    __table_args__ = (
        UniqueConstraint("passage_pk", "position"),
        Index("ix_citation_collection", "collection_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    collection_id: Mapped[int] = mapped_column(ForeignKey("collection.id", ondelete="CASCADE"))
    passage_pk: Mapped[int] = mapped_column(ForeignKey("passage.id", ondelete="CASCADE"))
    doc_id: Mapped[str] = mapped_column(String(300))
    position: Mapped[int] = mapped_column(Integer)
    # The cited sentence's index in the response, and the report's confidence (ragtime) if it gave one.
    sentence: Mapped[int] = mapped_column(Integer, default=0)
    confidence: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)


class ExternalJudgment(Base):
    """A graded judgment from another judge (e.g. UMBRELA's 0-3), kept apart from the manual ``judgment`` truth.

    ``source`` names the judge; agreement and comparison read one source at a time.
    """

    __tablename__ = "external_judgment"
    __table_args__ = (
        UniqueConstraint("source", "pool_entry_pk"),
        Index("ix_external_judgment_collection_source", "collection_id", "source"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    collection_id: Mapped[int] = mapped_column(ForeignKey("collection.id", ondelete="CASCADE"))
    pool_entry_pk: Mapped[int] = mapped_column(ForeignKey("pool_entry.id", ondelete="CASCADE"))
    source: Mapped[str] = mapped_column(String(200))
    relevance: Mapped[int] = mapped_column(Integer)


class OfficialRank(Base):
    __tablename__ = "official_rank"
    __table_args__ = (UniqueConstraint("collection_id", "system_name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    collection_id: Mapped[int] = mapped_column(ForeignKey("collection.id", ondelete="CASCADE"))
    system_name: Mapped[str] = mapped_column(String(200))
    rank: Mapped[float] = mapped_column(Float)
