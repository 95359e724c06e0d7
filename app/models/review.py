"""People and their judgements: accounts, human grade overrides, and flags on spurious items."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, DateTime, ForeignKey, Index, Integer, String, Text, UniqueConstraint
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
    # Set when an organizer disables the account: it can no longer sign in, and its sessions end.
    disabled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


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
    # When ``rating`` was last set (``created_at`` is when the cell was first overridden).
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class OverrideEvent(Base):
    """One judge's action on one cell, in order: the audit trail behind undo, judge agreement and trends.

    ``rating`` is the cell's override after the action (None: cleared); ``previous_rating`` and
    ``previous_judge`` what it was before, so undo restores exactly that. ``model_rating`` is the
    grade the judge was shown, so judge-vs-grader agreement needs no join to a grader that may
    have been regraded since. ``undone`` marks an action that an undo reversed.
    """

    __tablename__ = "override_event"
    __table_args__ = (
        Index("ix_override_event_judge", "collection_id", "judge", "id"),
        Index("ix_override_event_cell", "pool_entry_pk", "item_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    collection_id: Mapped[int] = mapped_column(ForeignKey("collection.id", ondelete="CASCADE"))
    pool_entry_pk: Mapped[int] = mapped_column(ForeignKey("pool_entry.id", ondelete="CASCADE"))
    item_id: Mapped[str] = mapped_column(String(300))
    judge: Mapped[str] = mapped_column(String(100))
    action: Mapped[str] = mapped_column(String(20))  # set | accept | clear
    rating: Mapped[int | None] = mapped_column(Integer, nullable=True)
    previous_rating: Mapped[int | None] = mapped_column(Integer, nullable=True)
    previous_judge: Mapped[str | None] = mapped_column(String(100), nullable=True)
    model_rating: Mapped[int | None] = mapped_column(Integer, nullable=True)
    grader_pk: Mapped[int | None] = mapped_column(ForeignKey("grader.id", ondelete="SET NULL"), nullable=True)
    # How the cell was chosen: "grid", "queue" (uncertainty order) or "sample" (uniform; PPI needs it).
    source: Mapped[str] = mapped_column(String(20), default="grid")
    undone: Mapped[bool] = mapped_column(Boolean, default=False)
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
