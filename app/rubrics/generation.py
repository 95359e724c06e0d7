"""Phase 1: draft questions or nuggets with an LLM, stored as a *draft* rubric version for judges.

The prompts are the published ones (spec §1.4.1; papers 000, 002, 003): the DL style per query,
the CAR style per query subtopic, and the older "Python list" variants of the papers. Parsing is
forgiving, as model output is: a fenced or bare JSON object or list, a Python list, or numbered lines.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.collections.service import CollectionWriter
from app.errors import Conflict
from app.grading import templates as t
from app.grading.backends.base import BackendError
from app.grading.prompts import PromptMessages, fill
from app.models import BankItem, Collection, Query, RubricVersion
from app.rubrics.service import (
    ItemSpec,
    create_version,
    item_id_for,
    latest_version,
    lock_rubric,
    store_items,
    version_item_pks,
)

Kind = Literal["questions", "nuggets"]
Style = Literal["dl", "car", "paper-dl", "paper-car"]
_FENCED = re.compile(r"```(?:json|python)?\s*(.*?)```", re.S)
_NUMBERED = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s+(.+?)\s*$", re.M)


class Generator(Protocol):
    def generate(self, prompts: Sequence[PromptMessages]) -> list[str | BackendError]: ...


class GenerationParseError(ValueError):
    pass


def generation_prompt(kind: Kind, style: Style, query_text: str, subtopic: str | None = None, n: int = 10) -> str:
    """The published generation prompt, with the JSON instruction appended directly (no separator)."""
    if style == "paper-dl":
        return fill(t.PAPER_DL_QUESTION_GENERATION.replace("{query_title}", "{query}"), query=query_text)
    if style == "paper-car":
        return _car(t.PAPER_CAR_QUESTION_GENERATION, query_text, subtopic)
    if style == "car":
        template = t.CAR_QUESTION_GENERATION if kind == "questions" else t.CAR_NUGGET_GENERATION
        body = _car(template, query_text, subtopic)
    else:
        template = t.DL_QUESTION_GENERATION if kind == "questions" else t.DL_NUGGET_GENERATION
        body = template.replace("{query_text}", query_text)
        if n != 10:
            body = body.replace("Generate 10 ", f"Generate {n} ")
    return body + (t.QUESTION_JSON_INSTRUCTION if kind == "questions" else t.NUGGET_JSON_INSTRUCTION)


def _car(template: str, title: str, subtopic: str | None) -> str:
    return template.replace("{query_title}", title).replace("{query_subtopic}", subtopic or title)


def parse_generated_items(text: str, kind: Kind) -> list[str]:
    """Items from a model's answer: fenced/bare JSON ({"questions": [...]} or a list), a Python list, or lines."""
    candidates = [m.group(1) for m in _FENCED.finditer(text)] + [text]
    for candidate in candidates:
        items = _structured(candidate.strip(), kind)
        if items:
            return items
    lines = [m.group(1) for m in _NUMBERED.finditer(text)]
    if lines:
        return lines
    raise GenerationParseError(f"no {kind} found in the model's answer: {text[:200]!r}")


def _structured(text: str, kind: Kind) -> list[str]:
    for start, end in (("{", "}"), ("[", "]")):
        left, right = text.find(start), text.rfind(end)
        if left < 0 or right <= left:
            continue
        snippet = text[left : right + 1]
        for loader in (json.loads, ast.literal_eval):
            try:
                value = loader(snippet)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
            items = _items_of(value, kind)
            if items:
                return items
    return []


def _items_of(value: Any, kind: Kind) -> list[str]:
    if isinstance(value, dict):
        value = value.get(kind, value.get(kind.rstrip("s"), []))
    if isinstance(value, list):
        return [str(v).strip() for v in value if isinstance(v, str | int | float) and str(v).strip()]
    return []


@dataclass
class DraftReport:
    version_number: int | None = None
    items: int = 0
    failures: dict[str, str] = field(default_factory=dict)  # query id → why nothing was drafted


def draft_bank(
    session: Session,
    collection: Collection,
    generator: Generator,
    *,
    kind: Kind = "questions",
    style: Style = "dl",
    n: int = 10,
    query_ids: Sequence[str] | None = None,
    created_by: str = "llm",
) -> DraftReport:
    """Draft items for each query (and subtopic, CAR style) into a new draft version; failures are per query."""
    queries = list(session.scalars(select(Query).where(Query.collection_id == collection.id).order_by(Query.position)))
    if query_ids is not None:
        queries = [q for q in queries if q.query_id in set(query_ids)]
    jobs = [(q, facet) for q in queries for facet in _subtopics(q, style)]
    prompts = [PromptMessages(text=generation_prompt(kind, style, q.text, facet, n)) for q, facet in jobs]
    answers = generator.generate(prompts) if prompts else []
    report = DraftReport()
    specs: list[ItemSpec] = []
    for (query, facet), answer in zip(jobs, answers, strict=True):
        try:
            if isinstance(answer, BackendError):
                raise answer
            texts = parse_generated_items(answer, kind)
        except (BackendError, GenerationParseError) as error:
            report.failures[query.query_id] = str(error)
            continue
        specs += [_spec(query.query_id, text, kind, facet, generator) for text in dict.fromkeys(texts)]
    if not specs:
        return report
    writer = CollectionWriter(session, collection)
    item_pks = store_items(session, collection, writer, specs)
    base = version_item_pks(session, latest_version(session, collection))
    version = create_version(
        session,
        collection,
        base + [pk for pk in item_pks if pk not in base],
        created_by=created_by,
        note=f"LLM draft: {len(specs)} {kind} ({style} style)",
        status="draft",
        bank_meta={"draft_items": item_pks},
    )
    report.version_number, report.items = version.number, len(specs)
    return report


def _subtopics(query: Query, style: Style) -> list[str | None]:
    if style in ("car", "paper-car") and query.facets:
        return [str(f.get("text") or f.get("facet_id")) for f in query.facets]
    return [None]


def _spec(query_id: str, text: str, kind: Kind, facet: str | None, generator: Generator) -> ItemSpec:
    item_kind = "question" if kind == "questions" else "nugget"
    model = getattr(generator, "name", None)  # the backend's model: the creator a NuggetBanks export names
    return ItemSpec(
        query_id,
        item_id_for(query_id, text),
        item_kind,
        text,
        None,
        None,
        {"drafted": True, "facet": facet},
        provenance={"format": "llm-draft", "llm_model": model} if isinstance(model, str) else None,
    )


def accept_draft(
    session: Session, collection: Collection, draft: RubricVersion, accepted_item_ids: Sequence[str], user: str
) -> RubricVersion:
    """Publish a new version: the newest published items plus the accepted draft items."""
    lock_rubric(session, collection)  # the draft and the newest version are read after the lock: nothing is lost
    session.refresh(draft)
    if draft.status != "draft":
        raise Conflict(f"rubric version {draft.number} is not a draft (already reviewed)")
    drafted = set(draft.bank_meta.get("draft_items", []))
    wanted = set(accepted_item_ids)
    rows = session.execute(select(BankItem.id, BankItem.item_id, BankItem.kind).where(BankItem.id.in_(drafted))).all()
    accepted = [pk for pk, item_id, _ in rows if item_id in wanted]
    kinds = {kind for _, _, kind in rows}
    noun = f"{kinds.pop()}s" if len(kinds) == 1 else "items"
    base = version_item_pks(session, latest_version(session, collection))
    draft.status = "reviewed"
    return create_version(
        session,
        collection,
        base + [pk for pk in accepted if pk not in base],
        created_by=user,
        note=f"accepted {len(accepted)} of {len(drafted)} drafted {noun} from version {draft.number}",
    )
