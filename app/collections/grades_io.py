"""Grades in the interchange format: ExamGrades / Grades entries ⇄ Grade rows."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.collections.errors import ImportFormatError
from app.collections.schemas import PROMPT_CLASS_MAX, ExamGradesIn, GradesIn, ParagraphIn
from app.models import DIRECT_ITEM, Grade, Grader
from app.models.grading import identity_hash

GRADE_FIELDS = ("position", "raw_answer", "self_rating", "extracted_answer", "correct", "error")
# Optional fields whose presence we remember per grader, so an export writes what the import read.
_OPTIONAL = ("prompt_type", "relevance_label", "exam_ratio", "self_ratings")


def canonical_hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def ensure_grader(
    session: Session,
    *,
    model: str,
    prompt_class: str,
    template_hash: str,
    prompt_type: str,
    is_self_rated: bool,
    options: dict[str, Any],
    identity: dict[str, Any],
) -> int:
    """Primary key of the grader whose identity this is, created on first use.

    Found by the identity's hash only: a run that differs in anything that changes grades
    (backend, endpoint, host, decoding, template) gets a new row and never writes into this one.
    """
    cache: dict[str, int] = session.info.setdefault("grader_pks", {})
    key = identity_hash(identity)
    if key in cache:
        return cache[key]
    pk = session.scalar(select(Grader.id).where(Grader.identity_hash == key))
    if pk is None:
        grader = Grader(
            model=model,
            prompt_class=prompt_class,
            template_hash=template_hash,
            prompt_type=prompt_type,
            is_self_rated=is_self_rated,
            options=options,
            identity=identity,
            identity_hash=key,
        )
        session.add(grader)
        session.flush()
        pk = grader.id
    cache[key] = pk
    return pk


def _prompt_class(entry: ExamGradesIn | GradesIn, file: str, line: int, field: str) -> str:
    """The entry's ``prompt_info.prompt_class``, which must fit Grader.prompt_class."""
    prompt_class = str((entry.prompt_info or {}).get("prompt_class", "QuestionPromptWithChoices"))
    if len(prompt_class) > PROMPT_CLASS_MAX:
        raise ImportFormatError(
            file, line, f"{field}.prompt_info.prompt_class", f"longer than {PROMPT_CLASS_MAX} characters"
        )
    return prompt_class


GraderCache = dict[tuple[Any, ...], int]  # one import's graders, by what the file says of them


def _imported_grader(
    session: Session,
    known: GraderCache,
    entry: ExamGradesIn | GradesIn,
    prompt_type: str,
    is_self_rated: bool,
    prompt_class: str,
) -> int:
    present = [name for name in _OPTIONAL if name in entry.model_fields_set]
    # Every paragraph of a file repeats its graders: find them without hashing their identity again.
    # reprs of JSON values are equal only for equal values; a miss just takes the long way.
    key = (
        entry.llm,
        prompt_type,
        is_self_rated,
        prompt_class,
        tuple(present),
        repr(entry.llm_options),
        repr(entry.prompt_info),
    )
    if key in known:
        return known[key]
    known[key] = _new_imported_grader(session, entry, prompt_type, is_self_rated, prompt_class, present)
    return known[key]


def _new_imported_grader(
    session: Session,
    entry: ExamGradesIn | GradesIn,
    prompt_type: str,
    is_self_rated: bool,
    prompt_class: str,
    present: list[str],
) -> int:
    options = {
        "source": "interchange",
        "llm_options": entry.llm_options,
        "prompt_info": entry.prompt_info,
        "fields": present,
        "prompt_type": prompt_type,
    }
    template_hash = "imported:" + canonical_hash(options)[:24]
    # Every option the file recorded is part of the identity: two files of one model and prompt
    # class whose llm_options differ are two graders; the same file imported twice is one.
    identity = {
        "backend": "imported",
        "model": entry.llm,
        "prompt_class": prompt_class,
        "prompt_type": prompt_type,
        "llm_options": entry.llm_options,
        "prompt_info": entry.prompt_info,
        "fields": present,
        "template_hash": template_hash,
    }
    return ensure_grader(
        session,
        model=entry.llm,
        prompt_class=prompt_class,
        template_hash=template_hash,
        prompt_type=prompt_type,
        is_self_rated=is_self_rated,
        options=options,
        identity=identity,
    )


def _rating_key(entry: ExamGradesIn, file: str, line: int, field: str) -> tuple[dict[str, int], str]:
    ratings: dict[str, int] = {}
    key = "question_id"
    for i, rating in enumerate(entry.self_ratings or []):
        nugget_id = rating.get("nugget_id")
        item_id = rating.get("question_id") or nugget_id
        if item_id is None:
            raise ImportFormatError(file, line, f"{field}.self_ratings[{i}]", "needs question_id or nugget_id")
        if nugget_id is not None:
            key = "nugget_id"
        ratings[item_id] = rating["self_rating"]
    return ratings, key


# Column order of the tuples :func:`paragraph_grade_rows` yields (the import's bulk writer takes them).
GRADE_COLUMNS = (
    "pool_entry_pk",
    "grader_pk",
    "item_id",
    "position",
    "raw_answer",
    "self_rating",
    "extracted_answer",
    "correct",
    "error",
    "created_at",
    "collection_id",
    "revision",
)
GradeStamp = tuple[int, int, datetime]  # (collection id, revision, created_at) shared by one import's rows


def _exam_grade_rows(
    entry: ExamGradesIn, grader_pk: int, entry_pk: int, where: tuple[str, int, str], stamp: GradeStamp
) -> list[tuple[Any, ...]]:
    file, line, field = where
    ratings, _ = _rating_key(entry, file, line, field)
    answers: dict[str, str] = {}
    for i, (item_id, answer) in enumerate(entry.answers):
        if item_id in answers:
            raise ImportFormatError(file, line, f"{field}.answers[{i}]", f"duplicate answer for item {item_id!r}")
        answers[item_id] = answer
    correct, wrong = set(entry.correctAnswered), set(entry.wrongAnswered)
    errors = entry.llm_response_errors or {}
    order = list(dict.fromkeys([*answers, *ratings, *entry.correctAnswered, *entry.wrongAnswered, *errors]))
    collection_id, revision, created_at = stamp
    return [
        (
            entry_pk,
            grader_pk,
            item_id,
            position,
            answers.get(item_id),
            ratings.get(item_id),
            None,
            True if item_id in correct else (False if item_id in wrong else None),
            errors.get(item_id),
            created_at,
            collection_id,
            revision,
        )
        for position, item_id in enumerate(order)
    ]


def paragraph_grade_rows(
    session: Session,
    entry_pk: int,
    paragraph: ParagraphIn,
    where: tuple[str, int, int],
    stamp: GradeStamp,
    graders: GraderCache,
) -> list[tuple[Any, ...]]:
    """The paragraph's exam_grades and grades as Grade rows in ``GRADE_COLUMNS`` order (one grader per entry).

    ``where`` is (file, line, paragraph index) for error messages; ``stamp`` the import's
    (collection, revision, created_at); ``graders`` the import's cache of its graders' keys.
    Graders are created on first use; the rows are the caller's to write.
    """
    file, line, index = where
    rows: list[tuple[Any, ...]] = []
    for g, entry in enumerate(paragraph.exam_grades or []):
        field = f"paragraphs[{index}].exam_grades[{g}]"
        _, key = _rating_key(entry, file, line, field)
        prompt_type = entry.prompt_type or ("nugget" if key == "nugget_id" else "question")
        prompt_class = _prompt_class(entry, file, line, field)
        grader_pk = _imported_grader(session, graders, entry, prompt_type, entry.self_ratings is not None, prompt_class)
        rows += _exam_grade_rows(entry, grader_pk, entry_pk, (file, line, field), stamp)
    collection_id, revision, created_at = stamp
    for d, direct in enumerate(paragraph.grades or []):
        prompt_class = _prompt_class(direct, file, line, f"paragraphs[{index}].grades[{d}]")
        grader_pk = _imported_grader(
            session, graders, direct, "direct_grading", direct.self_ratings is not None, prompt_class
        )
        rows.append(
            (
                entry_pk,
                grader_pk,
                DIRECT_ITEM,
                0,
                direct.answer,
                direct.self_ratings,
                None,
                direct.correctAnswered,
                direct.llm_response_error,
                created_at,
                collection_id,
                revision,
            )
        )
    if len({(row[1], row[2]) for row in rows}) != len(rows):
        raise ImportFormatError(file, line, f"paragraphs[{index}].exam_grades", "two grade entries of one grader")
    return rows


def exam_grades_entry(grader: Grader, grades: list[Grade]) -> dict[str, Any]:
    """Rebuild one ExamGrades object from a grader's rows for one paragraph (in stored order)."""
    options = grader.options
    fields = set(options.get("fields", ["self_ratings"] if grader.is_self_rated else []))
    rating_key = "nugget_id" if grader.prompt_type == "nugget" else "question_id"
    answered = [g for g in grades if g.raw_answer is not None]
    result: dict[str, Any] = {
        "correctAnswered": [g.item_id for g in grades if g.correct is True],
        "wrongAnswered": [g.item_id for g in grades if g.correct is False],
        "answers": [[g.item_id, g.raw_answer] for g in answered],
    }
    errors = {g.item_id: g.error for g in grades if g.error is not None}
    if errors:
        result["llm_response_errors"] = errors
    result["llm"] = grader.model
    result["llm_options"] = options.get("llm_options", {})
    if "exam_ratio" in fields or options.get("source") != "interchange":
        result["exam_ratio"] = len(result["correctAnswered"]) / len(answered) if answered else 0.0
    result["prompt_info"] = options.get("prompt_info") or {"prompt_class": grader.prompt_class}
    if "self_ratings" in fields:
        result["self_ratings"] = [
            {rating_key: g.item_id, "self_rating": g.self_rating} for g in grades if g.self_rating is not None
        ]
    if "prompt_type" in fields:
        result["prompt_type"] = grader.prompt_type
    if "relevance_label" in fields:
        ratings = [g.self_rating for g in grades if g.self_rating is not None]
        result["relevance_label"] = max(ratings) if ratings else len(result["correctAnswered"])
    return result


def direct_grades_entry(grader: Grader, grade: Grade) -> dict[str, Any]:
    """Rebuild one direct-prompt Grades object."""
    options = grader.options
    fields = set(options.get("fields", ["self_ratings"]))
    result: dict[str, Any] = {"correctAnswered": bool(grade.correct), "answer": grade.raw_answer or ""}
    if grade.error is not None:
        result["llm_response_error"] = grade.error
    result["llm"] = grader.model
    result["llm_options"] = options.get("llm_options", {})
    result["prompt_info"] = options.get("prompt_info") or {"prompt_class": grader.prompt_class}
    if "self_ratings" in fields and grade.self_rating is not None:
        result["self_ratings"] = grade.self_rating
    if "prompt_type" in fields:
        result["prompt_type"] = grader.prompt_type
    if "relevance_label" in fields:
        result["relevance_label"] = grade.self_rating if grade.self_rating is not None else int(bool(grade.correct))
    return result
