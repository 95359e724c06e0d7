"""People and their judgements: accounts, human grade overrides, and flags on spurious items."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, utcnow

ROLES = ("viewer", "judge", "organizer")


class User(Base):
    __tablename__ = "app_user"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    # The case-folded name: unique, so "Alice" and "alice" cannot both exist (app.accounts.names).
    name_key: Mapped[str] = mapped_column(String(120), unique=True)
    role: Mapped[str] = mapped_column(String(20))
    password_hash: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class GradeOverride(Base):
    """A judge's grade for one cell, kept apart from every LLM grade; evaluation may include it or not."""

    __tablename__ = "grade_override"
    __table_args__ = (UniqueConstraint("pool_entry_pk", "item_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    pool_entry_pk: Mapped[int] = mapped_column(ForeignKey("pool_entry.id", ondelete="CASCADE"))
    item_id: Mapped[str] = mapped_column(String(300))
    rating: Mapped[int] = mapped_column(Integer)
    judge: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ItemFlag(Base):
    """A judge marked a bank item as spurious (answered by non-relevant passages, or off-topic)."""

    __tablename__ = "item_flag"
    __table_args__ = (UniqueConstraint("collection_id", "item_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    collection_id: Mapped[int] = mapped_column(ForeignKey("collection.id", ondelete="CASCADE"))
    item_id: Mapped[str] = mapped_column(String(300))
    flagged_by: Mapped[str] = mapped_column(String(100))
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
