"""Grader configurations and grades: one grade per (pool entry, bank item, grader)."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.engine.default import DefaultExecutionContext
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, utcnow

DIRECT_ITEM = ""  # item_id of a direct (whole-passage) relevance grade, which has no bank item


def identity_hash(identity: dict[str, Any]) -> str:
    """sha256 hex of the canonical JSON (sorted keys, no spaces) of a grader identity."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def legacy_identity(model: str, prompt_class: str, template_hash: str) -> dict[str, Any]:
    """The identity of a grader row that recorded too little to say how it graded (the old triple)."""
    return {"legacy": True, "model": model, "prompt_class": prompt_class, "template_hash": template_hash}


def _default_identity(context: DefaultExecutionContext) -> dict[str, Any]:
    row: dict[str, Any] = context.get_current_parameters()  # type: ignore[no-untyped-call]
    return legacy_identity(row["model"], row["prompt_class"], row["template_hash"])


def _default_identity_hash(context: DefaultExecutionContext) -> str:
    row: dict[str, Any] = context.get_current_parameters()  # type: ignore[no-untyped-call]
    return identity_hash(row.get("identity") or _default_identity(context))


class Grader(Base):
    """One grader: everything that changes its grades is in ``identity``, unique by ``identity_hash``.

    A run whose backend, endpoint, host, decoding or template differs is another row by
    construction, so it can never overwrite this one's grades (app/collections/grades_io.py).
    """

    __tablename__ = "grader"
    __table_args__ = (UniqueConstraint("identity_hash"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    model: Mapped[str] = mapped_column(String(300))
    prompt_class: Mapped[str] = mapped_column(String(200))
    template_hash: Mapped[str] = mapped_column(String(64))
    prompt_type: Mapped[str] = mapped_column(String(20))  # question | nugget | direct_grading
    is_self_rated: Mapped[bool] = mapped_column(Boolean, default=True)
    # llm_options, prompt_info and which optional fields the source file carried.
    options: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # What changes the grades (backend, endpoint, model and revision, host, decoding, template...);
    # rows built directly (tests, old code) get the legacy triple.
    identity: Mapped[dict[str, Any]] = mapped_column(JSON, default=_default_identity)
    identity_hash: Mapped[str] = mapped_column(String(64), default=_default_identity_hash)


class Grade(Base):
    __tablename__ = "grade"
    __table_args__ = (
        UniqueConstraint("grader_pk", "pool_entry_pk", "item_id"),
        Index("ix_grade_pool_entry", "pool_entry_pk"),
        Index("ix_grade_collection_revision", "collection_id", "revision"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    pool_entry_pk: Mapped[int] = mapped_column(ForeignKey("pool_entry.id", ondelete="CASCADE"))
    grader_pk: Mapped[int] = mapped_column(ForeignKey("grader.id", ondelete="CASCADE"))
    item_id: Mapped[str] = mapped_column(String(300))
    position: Mapped[int] = mapped_column(Integer, default=0)
    raw_answer: Mapped[str | None] = mapped_column(Text, default=None)
    self_rating: Mapped[int | None] = mapped_column(Integer, default=None)
    extracted_answer: Mapped[str | None] = mapped_column(Text, default=None)
    correct: Mapped[bool | None] = mapped_column(Boolean, default=None)
    error: Mapped[Any] = mapped_column(JSON, nullable=True, default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # score mode: P(grade) over the answer tokens, E[grade], and the mass that fell on valid tokens
    probabilities: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=None)
    expected_grade: Mapped[float | None] = mapped_column(Float, default=None)
    valid_mass: Mapped[float | None] = mapped_column(Float, default=None)
    cache_key: Mapped[str | None] = mapped_column(String(64), default=None)
    # The owning collection (that of the pool entry) and its revision when the row was last written:
    # evaluation snapshots read only a collection's rows newer than the revision they have seen.
    # No foreign key: the pool entry's already implies it, and each one is a row-by-row check in a
    # PostgreSQL import (migration 0011).
    collection_id: Mapped[int] = mapped_column(Integer)
    revision: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class GradeCache(Base):
    """Content-addressed model outputs: key = hash(model, decoding, template, item text, passage text).

    Shared across collections and graders' grade rows; errors are never cached, so they are retried.
    """

    __tablename__ = "grade_cache"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    raw_answer: Mapped[str | None] = mapped_column(Text, default=None)
    self_rating: Mapped[int | None] = mapped_column(Integer, default=None)
    extracted_answer: Mapped[str | None] = mapped_column(Text, default=None)
    correct: Mapped[bool | None] = mapped_column(Boolean, default=None)
    probabilities: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=None)
    expected_grade: Mapped[float | None] = mapped_column(Float, default=None)
    valid_mass: Mapped[float | None] = mapped_column(Float, default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
