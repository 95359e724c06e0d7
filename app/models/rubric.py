"""Test banks: immutable items and immutable rubric versions that list them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, TimestampMixin


class BankItem(Base):
    """A question or nugget. Rows are never updated: an edit is a new row."""

    __tablename__ = "bank_item"
    __table_args__ = (
        UniqueConstraint("collection_id", "item_id", "content_hash"),
        Index("ix_bank_item_query", "query_pk"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    collection_id: Mapped[int] = mapped_column(ForeignKey("collection.id", ondelete="CASCADE"))
    query_pk: Mapped[int] = mapped_column(ForeignKey("query.id", ondelete="CASCADE"))
    item_id: Mapped[str] = mapped_column(String(300))
    kind: Mapped[str] = mapped_column(String(20))  # "question" | "nugget"
    text: Mapped[str] = mapped_column(Text)
    gold_answers: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True, default=None)
    facet_id: Mapped[str | None] = mapped_column(String(200), default=None)
    info: Mapped[Any] = mapped_column(JSON, nullable=True, default=None)
    content_hash: Mapped[str] = mapped_column(String(64))
    # Nugget importance (docs/formats.md): "vital" | "okay"; None is unspecified and weighs like vital.
    importance: Mapped[str | None] = mapped_column(String(20), nullable=True, default=None)
    # An explicit weight; None takes the importance's (vital 1.0, okay 0.5, unspecified 1.0).
    weight: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    # Sub-nuggets: {"op": "and" | "or", "children": [{"id", "text", "kind", "gold_answers"?, "op"?, "children"?}]}.
    structure: Mapped[Any] = mapped_column(JSON, nullable=True, default=None)
    # Where the item came from: {"format", "creator": [{"is_human", "llm_model", ...}], "references", ...}.
    provenance: Mapped[Any] = mapped_column(JSON, nullable=True, default=None)


class RubricVersion(TimestampMixin, Base):
    __tablename__ = "rubric_version"
    __table_args__ = (UniqueConstraint("collection_id", "number"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    collection_id: Mapped[int] = mapped_column(ForeignKey("collection.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    created_by: Mapped[str] = mapped_column(String(200), default="import")
    note: Mapped[str] = mapped_column(Text, default="")
    # "published" versions are what grading and leaderboards use; "draft" holds LLM-drafted items for review.
    status: Mapped[str] = mapped_column(String(20), default="published", server_default="published")
    # Per-(kind, query) envelope of the bank files (test_collection, info, hash, format), for export.
    bank_meta: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class RubricVersionItem(Base):
    __tablename__ = "rubric_version_item"

    version_pk: Mapped[int] = mapped_column(ForeignKey("rubric_version.id", ondelete="CASCADE"), primary_key=True)
    item_pk: Mapped[int] = mapped_column(ForeignKey("bank_item.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer)
