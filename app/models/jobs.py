"""Background jobs as database rows: a job is split into batches of cells, each an idempotent task."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, utcnow

JOB_STATES = ("queued", "running", "done", "failed", "cancelled")


class Job(Base):
    __tablename__ = "job"
    __table_args__ = (Index("ix_job_collection", "collection_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    collection_id: Mapped[int] = mapped_column(ForeignKey("collection.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(30))  # grade | regrade | generate
    launched_by: Mapped[str] = mapped_column(String(200), default="cli")
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    state: Mapped[str] = mapped_column(String(20), default="queued")
    total: Mapped[int] = mapped_column(Integer, default=0)
    done: Mapped[int] = mapped_column(Integer, default=0)
    cached: Mapped[int] = mapped_column(Integer, default=0)
    errors: Mapped[int] = mapped_column(Integer, default=0)
    model_calls: Mapped[int] = mapped_column(Integer, default=0)
    message: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)


class JobBatch(Base):
    """A slice of a job's cells: ``cells`` is a list of ``[pool_entry_pk, item_id]`` pairs."""

    __tablename__ = "job_batch"
    __table_args__ = (UniqueConstraint("job_pk", "number"), Index("ix_job_batch_state", "state"))

    id: Mapped[int] = mapped_column(primary_key=True)
    job_pk: Mapped[int] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    cells: Mapped[list[Any]] = mapped_column(JSON, default=list)
    state: Mapped[str] = mapped_column(String(20), default="queued")  # queued | running | done | failed | cancelled
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    done: Mapped[int] = mapped_column(Integer, default=0)
    cached: Mapped[int] = mapped_column(Integer, default=0)
    errors: Mapped[int] = mapped_column(Integer, default=0)
    model_calls: Mapped[int] = mapped_column(Integer, default=0)
    seconds: Mapped[float | None] = mapped_column(default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
