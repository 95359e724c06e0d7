"""Nugget banks in the formats of TREC RAG and TREC AutoJudge (docs/formats.md).

Two inputs become a new rubric version, in one transaction with the rest of the import:

* **NuggetBanks v3** (``autojudge_base.nugget_data.NuggetBank``): one bank per JSONL line, or a
  ``.json`` file holding one bank or a ``{"format_version", "banks": {query_id: bank}}`` container.
  A nugget question becomes a ``question`` item with its gold answers, a claim a ``nugget`` item;
  sub-nuggets become the item's ``structure`` (AND/OR), and creator, references and metadata its
  ``provenance``.
* **AutoNuggetizer nugget lists** (``{"qid", "query", "nuggets": [{"text", "importance"}]}``, as
  ``autojudge_base.nugget_data.NuggetizerNuggetBank`` reads them): each nugget a ``nugget`` item
  with its importance.

The format is detected per record. The export writes a rubric version as NuggetBanks v3 JSONL with
each item's creator taken from the audit trail (``nugget_banks``).

We write these formats with our own models: the product never imports ``autojudge_base``; the
tests load our output with its models (tests/interop.py).
"""

from __future__ import annotations

import gzip
import json
import math
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.collections.errors import ImportFormatError
from app.collections.readers import check_length, iter_lines, load_json
from app.collections.schemas import ITEM_ID_MAX, QUERY_ID_MAX
from app.collections.service import CollectionWriter, ImportReport
from app.errors import Invalid
from app.models import BankItem, Collection, Query, RubricVersion, RubricVersionItem
from app.rubrics.service import ItemSpec, item_id_for, new_version_if_changed, store_items, version_by_number

IMPORTANCES = ("vital", "okay")
DEFAULT_WEIGHTS = {"vital": 1.0, "okay": 0.5}
WEIGHT_MAX = 1000.0
NUGGETBANKS_FORMAT = "nuggetbanks-v3"
NUGGETIZER_FORMAT = "autonuggetizer"


def item_weight(importance: str | None, weight: float | None) -> float:
    """An item's weight: w = explicit weight if set, else 1.0 (vital), 0.5 (okay), 1.0 (unspecified)."""
    if weight is not None:
        return weight
    return DEFAULT_WEIGHTS.get(importance or "vital", 1.0)


OPERATOR_LABELS = {"and": "all of", "or": "any of"}


def structure_view(structure: Any) -> dict[str, Any] | None:
    """An item's sub-nuggets for a page: {"label": "all of" | "any of" | op, "children": [{"text", "importance",
    "sub"}]}."""
    if not isinstance(structure, dict) or not structure.get("children"):
        return None
    op = str(structure.get("op", "or"))
    children = [
        {"text": str(c.get("text", "")), "importance": c.get("importance"), "sub": structure_view(c)}
        for c in structure["children"]
        if isinstance(c, dict)
    ]
    return {"label": OPERATOR_LABELS.get(op, op), "children": children}


# -- input models (theirs are lenient: unknown fields are ignored, so are ours) ---------------------


class _In(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


Scalar = StrictStr | StrictInt | StrictFloat
Metadata = dict[str, Any] | None


class CreatorIn(_In):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    is_human: StrictBool


class ReferenceIn(_In):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    doc_id: StrictStr


References = list[StrictStr | ReferenceIn] | None


class AnswerIn(_In):
    answer: StrictStr
    references: References = None
    quality: Scalar | None = None
    importance: Scalar | None = None
    creator: list[CreatorIn] | None = None
    metadata: Metadata = None


class _NuggetIn(_In):
    references: References = None
    sub_nuggets: list[QuestionIn | ClaimIn] | None = None
    aggregator_type: StrictStr | None = None
    query_id: StrictStr | None = None
    quality: Scalar | None = None
    importance: Scalar | None = None
    creator: list[CreatorIn] | None = None
    metadata: Metadata = None


class QuestionIn(_NuggetIn):
    question: Annotated[StrictStr, Field(min_length=1)]
    question_id: Annotated[StrictStr, Field(max_length=ITEM_ID_MAX)] | None = None
    answers: dict[str, AnswerIn] | list[AnswerIn] | None = None


class ClaimIn(_NuggetIn):
    claim: Annotated[StrictStr, Field(min_length=1)]
    claim_id: Annotated[StrictStr, Field(max_length=ITEM_ID_MAX)] | None = None


class NuggetBankIn(_In):
    query_id: Annotated[StrictStr, Field(min_length=1, max_length=QUERY_ID_MAX)] | None = None
    title_query: StrictStr | None = None
    test_collection: StrictStr | None = None
    format_version: StrictStr | None = None
    nugget_bank: dict[str, QuestionIn] | list[QuestionIn] | None = None
    claim_bank: dict[str, ClaimIn] | list[ClaimIn] | None = None
    quality: Scalar | None = None
    importance: Scalar | None = None
    creator: list[CreatorIn] | None = None
    metadata: Metadata = None


class NuggetizerNuggetIn(_In):
    text: Annotated[StrictStr, Field(min_length=1)]
    importance: StrictStr | None = None
    reasoning: StrictStr | None = None


class NuggetizerBankIn(_In):
    qid: Annotated[StrictStr, Field(min_length=1, max_length=QUERY_ID_MAX)] | StrictInt
    query: StrictStr | dict[str, Any] = ""
    nuggets: list[NuggetizerNuggetIn]


for _model in (_NuggetIn, QuestionIn, ClaimIn, NuggetBankIn):
    _model.model_rebuild()

Model = TypeVar("Model", bound=BaseModel)
# a union branch's label in a pydantic error location (``list[ClaimIn]``, ``str``, ``constrained-str``)
_BRANCH = re.compile(r"^((dict|list)\[.*\]|str|int|float|bool|constrained-\w+|function-\w+|[A-Z]\w*In)$")
Nugget = TypeVar("Nugget", QuestionIn, ClaimIn)


# -- reading ------------------------------------------------------------------------------------


def validated(model: type[Model], record: Any, file: str, line: int | None) -> Model:
    """``model`` of ``record``, else an ImportFormatError at the bad field (``a.b[0].c``).

    Of a union's errors, the deepest is the one whose branch fit the input best; the union's branch
    labels (``list[ClaimIn]``) are no field of the user's file and are left out of the location.
    """
    try:
        return model.model_validate(record)
    except ValidationError as exc:
        first = max(exc.errors(), key=lambda error: len(error["loc"]))
        parts = [p for p in first["loc"] if isinstance(p, int) or not _BRANCH.search(p)]
        field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).lstrip(".")
        raise ImportFormatError(file, line, field or None, first["msg"]) from None


def _records(path: Path) -> Iterator[tuple[int | None, Any]]:
    """(line, JSON value): one per JSONL line, or the whole document of a ``.json[.gz]`` file."""
    name = str(path)
    if name.lower().removesuffix(".gz").endswith(".json"):
        text = "".join(line for _, line in iter_lines(path))
        document = load_json(name, None, text)
        if isinstance(document, dict) and isinstance(document.get("banks"), dict):
            yield from ((None, bank) for bank in document["banks"].values())
        else:
            yield None, document
        return
    for line, raw in iter_lines(path):
        yield line, load_json(name, line, raw)


def _importance(raw: Any, file: str, line: int | None, field: str) -> tuple[str | None, float | None]:
    """(importance, weight): "vital"/"okay" as named; a number is an explicit weight; other labels are kept
    in the provenance only (AutoNuggetizer's "failed" is no importance)."""
    if isinstance(raw, str) and raw.strip().lower() in IMPORTANCES:
        return raw.strip().lower(), None
    number = raw if isinstance(raw, int | float) and not isinstance(raw, bool) else None
    if isinstance(raw, str):
        try:
            number = float(raw)
        except ValueError:
            return None, None
    if number is None:
        return None, None
    if not (math.isfinite(number) and 0 <= number <= WEIGHT_MAX):
        raise ImportFormatError(file, line, field, f"a weight must be between 0 and {WEIGHT_MAX:g}, got {raw!r}")
    return None, float(number)


def _doc_ids(references: References) -> list[str]:
    return [r if isinstance(r, str) else r.doc_id for r in references or []]


def _creators(creators: list[CreatorIn] | None) -> list[dict[str, Any]] | None:
    return [c.model_dump(exclude_none=True) for c in creators] if creators else None


def _compact(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v not in (None, [], {})}


def _answers(question: QuestionIn) -> list[AnswerIn]:
    answers = question.answers or []
    return list(answers.values()) if isinstance(answers, dict) else answers


def _op(aggregator: str | None) -> str:
    """AND/OR/... lower-cased; unset or "Default" is "or", as autojudge_base reads an unset aggregator."""
    return "or" if aggregator is None or aggregator.lower() == "default" else aggregator.lower()


def _child(query_id: str, nugget: QuestionIn | ClaimIn) -> dict[str, Any]:
    child: dict[str, Any]
    if isinstance(nugget, QuestionIn):
        child = {
            "id": nugget.question_id or item_id_for(query_id, nugget.question),
            "text": nugget.question,
            "kind": "question",
            "gold_answers": [a.answer for a in _answers(nugget)] or None,
        }
    else:
        child = {"id": nugget.claim_id or item_id_for(query_id, nugget.claim), "text": nugget.claim, "kind": "nugget"}
    child["importance"] = nugget.importance
    return _compact(child | (_structure(query_id, nugget) or {}))


def _structure(query_id: str, nugget: QuestionIn | ClaimIn) -> dict[str, Any] | None:
    if not nugget.sub_nuggets:
        return None
    return {"op": _op(nugget.aggregator_type), "children": [_child(query_id, s) for s in nugget.sub_nuggets]}


def _nugget_spec(query_id: str, nugget: QuestionIn | ClaimIn, file: str, line: int | None, field: str) -> ItemSpec:
    importance, weight = _importance(nugget.importance, file, line, f"{field}.importance")
    if isinstance(nugget, QuestionIn):
        kind, text, given_id = "question", nugget.question, nugget.question_id
        answers = _answers(nugget)
        gold = [a.answer for a in answers] or None
        answer_refs = {a.answer: _doc_ids(a.references) for a in answers if a.references} or None
        answer_creators = {a.answer: _creators(a.creator) for a in answers if a.creator} or None
    else:
        kind, text, given_id = "nugget", nugget.claim, nugget.claim_id
        gold, answer_refs, answer_creators = None, None, None
    provenance = _compact(
        {
            "format": NUGGETBANKS_FORMAT,
            "creator": _creators(nugget.creator),
            "references": _doc_ids(nugget.references) or None,
            "answer_references": answer_refs,
            "answer_creators": answer_creators,
            "quality": nugget.quality,
            "importance": nugget.importance if importance is None and weight is None else None,
            "metadata": nugget.metadata,
        }
    )
    return ItemSpec(
        query_id,
        given_id or item_id_for(query_id, text),
        kind,
        text,
        gold,
        None,
        None,
        importance=importance,
        weight=weight,
        structure=_structure(query_id, nugget),
        provenance=provenance,
    )


def _bank_query_id(bank: NuggetBankIn, file: str, line: int | None) -> str:
    metadata = bank.metadata or {}
    query_id = bank.query_id or metadata.get("topic_id") or metadata.get("query_id")
    if query_id is None or str(query_id) == "":
        raise ImportFormatError(file, line, "query_id", "a nugget bank needs a query_id (or metadata.topic_id)")
    return check_length(str(query_id), QUERY_ID_MAX, file, line, "query_id")


def _keyed(name: str, nuggets: dict[str, Nugget] | list[Nugget] | None) -> list[tuple[str, Nugget]]:
    """(field, nugget) in file order: a bank is keyed by nugget text, or (parsing only) a list."""
    keyed = nuggets.items() if isinstance(nuggets, dict) else enumerate(nuggets or [])
    return [(f"{name}[{key}]", nugget) for key, nugget in keyed]


def _v3_specs(record: Any, file: str, line: int | None) -> BankSpecs:
    bank = validated(NuggetBankIn, record, file, line)
    query_id = _bank_query_id(bank, file, line)
    entries: list[tuple[str, QuestionIn | ClaimIn]] = [
        *_keyed("nugget_bank", bank.nugget_bank),
        *_keyed("claim_bank", bank.claim_bank),
    ]
    specs = [_nugget_spec(query_id, nugget, file, line, field) for field, nugget in entries]
    meta = _compact(
        {
            "format": NUGGETBANKS_FORMAT,
            "query_text": bank.title_query,
            "test_collection": bank.test_collection,
            "creator": _creators(bank.creator),
            "importance": bank.importance,
            "info": bank.metadata,
        }
    )
    return query_id, bank.title_query, specs, meta


BankSpecs = tuple[str, str | None, list[ItemSpec], dict[str, Any]]  # query id, query text, items, envelope


def _nuggetizer_specs(record: Any, file: str, line: int | None) -> BankSpecs:
    bank = validated(NuggetizerBankIn, record, file, line)
    query_id = check_length(str(bank.qid), QUERY_ID_MAX, file, line, "qid")
    query_text = bank.query if isinstance(bank.query, str) else str(bank.query.get("text", ""))
    specs = []
    for i, nugget in enumerate(bank.nuggets):
        importance, weight = _importance(nugget.importance, file, line, f"nuggets[{i}].importance")
        provenance = _compact(
            {
                "format": NUGGETIZER_FORMAT,
                "importance": nugget.importance if importance is None and weight is None else None,
                "reasoning": nugget.reasoning,
            }
        )
        specs.append(
            ItemSpec(
                query_id,
                item_id_for(query_id, nugget.text),
                "nugget",
                nugget.text,
                None,
                None,
                None,
                importance=importance,
                weight=weight,
                provenance=provenance,
            )
        )
    return query_id, query_text or None, specs, {"format": NUGGETIZER_FORMAT, "query_text": query_text}


def read_nugget_file(path: Path) -> Iterator[tuple[int | None, str, str | None, list[ItemSpec], dict[str, Any]]]:
    """(line, query id, query text, items, bank envelope) per bank; the format is detected per record."""
    file = str(path)
    for line, record in _records(path):
        if not isinstance(record, dict):
            raise ImportFormatError(file, line, None, "expected a JSON object (a nugget bank)")
        if "nuggets" in record and "qid" in record:
            yield line, *_nuggetizer_specs(record, file, line)
        elif any(key in record for key in ("nugget_bank", "claim_bank", "query_id", "title_query")):
            yield line, *_v3_specs(record, file, line)
        else:
            raise ImportFormatError(
                file,
                line,
                None,
                "not a nugget bank: expected NuggetBanks v3 (query_id, nugget_bank, claim_bank) "
                "or an AutoNuggetizer list (qid, query, nuggets)",
            )


def import_nuggets(session: Session, collection: Collection, paths: Sequence[Path]) -> ImportReport:
    """Import NuggetBanks v3 / AutoNuggetizer files into a new rubric version (none if nothing changed).

    As for test banks, the files' items replace the newest version's items of the same kind for the
    same queries; item ids are kept as given (``query_id/md5(text)`` where the file names none).
    """
    writer = CollectionWriter(session, collection)
    specs: list[ItemSpec] = []
    meta: dict[str, Any] = {}
    formats: set[str] = set()
    for path in paths:
        seen: set[tuple[str, str]] = set()
        for line, query_id, query_text, bank_specs, envelope in read_nugget_file(path):
            writer.ensure_query(query_id, query_text)
            for spec in bank_specs:
                if (query_id, spec.item_id) in seen:
                    raise ImportFormatError(str(path), line, "question_id", f"duplicate item id {spec.item_id!r}")
                seen.add((query_id, spec.item_id))
                meta[f"{spec.kind}:{query_id}"] = envelope
            formats.add(envelope["format"])
            specs += bank_specs
    item_pks = store_items(session, collection, writer, specs)
    note = f"imported nuggets ({', '.join(sorted(formats))})"
    new_version_if_changed(session, collection, writer, specs, item_pks, meta, note=note)
    session.flush()
    return writer.report


# -- export: a rubric version as NuggetBanks v3 ----------------------------------------------------------


def _first_versions(session: Session, collection: Collection) -> dict[int, RubricVersion]:
    """Item pk → the version that first listed it (the audit trail says who put the item there)."""
    first: dict[int, RubricVersion] = {}
    versions = session.scalars(
        select(RubricVersion).where(RubricVersion.collection_id == collection.id).order_by(RubricVersion.number)
    ).all()
    by_pk = {v.id: v for v in versions}
    rows = session.execute(
        select(RubricVersionItem.item_pk, RubricVersionItem.version_pk).where(RubricVersionItem.version_pk.in_(by_pk))
    ).all()
    for item_pk, version_pk in sorted(rows, key=lambda r: by_pk[r.version_pk].number):
        first.setdefault(item_pk, by_pk[version_pk])
    return first


def item_creator(item: BankItem, introduced_by: RubricVersion | None) -> list[dict[str, Any]] | None:
    """The creator of an item, from the audit trail.

    An imported creator is kept; an LLM-drafted item (``info.drafted``) was made by an LLM; an item a
    person added or edited was made by the account that saved its version (``created_by``). A plain
    import records no creator, and none is invented.
    """
    provenance = item.provenance if isinstance(item.provenance, dict) else {}
    if provenance.get("creator"):
        return list(provenance["creator"])
    info = item.info if isinstance(item.info, dict) else {}
    date = introduced_by.created_at.isoformat() if introduced_by and introduced_by.created_at else None
    if info.get("drafted") or (introduced_by is not None and introduced_by.created_by == "llm"):
        llm = _compact({"is_human": False, "llm_model": provenance.get("llm_model"), "creation_date": date})
        return [llm | {"llm_prompt_strategy": "rubric workbench draft"}]
    if introduced_by is None or introduced_by.created_by in ("import", "llm", ""):
        return None
    return [_compact({"is_human": True, "assessor_id": introduced_by.created_by, "creation_date": date})]


def _child_out(query_id: str, child: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any]
    if child.get("kind") == "question":
        answers = [{"answer": a} for a in child.get("gold_answers") or []]
        out = {"question": child["text"], "question_id": child.get("id"), "answers": answers or None}
    else:
        out = {"claim": child["text"], "claim_id": child.get("id")}
    out |= {"query_id": query_id, "importance": child.get("importance")}
    if child.get("children"):
        out |= {
            "aggregator_type": str(child.get("op", "or")).upper(),
            "sub_nuggets": [_child_out(query_id, c) for c in child["children"]],
        }
    return _compact(out)


def _nugget_out(query_id: str, item: BankItem, creator: list[dict[str, Any]] | None) -> dict[str, Any]:
    provenance = item.provenance if isinstance(item.provenance, dict) else {}
    metadata = _compact({**(provenance.get("metadata") or {}), "weight": item.weight})
    references = provenance.get("references")
    out: dict[str, Any] = {
        "query_id": query_id,
        "importance": item.importance,
        "quality": provenance.get("quality"),
        "creator": creator,
        "references": [{"doc_id": d} for d in references] if references else None,
        "metadata": metadata or None,
    }
    if item.kind == "question":
        refs = provenance.get("answer_references") or {}
        answers = [
            _compact({"answer": a, "references": [{"doc_id": d} for d in refs.get(a, [])] or None})
            for a in item.gold_answers or []
        ]
        out |= {"question": item.text, "question_id": item.item_id, "answers": answers or None}
    else:
        out |= {"claim": item.text, "claim_id": item.item_id}
    structure = item.structure if isinstance(item.structure, dict) else None
    if structure and structure.get("children"):
        out |= {
            "aggregator_type": str(structure.get("op", "or")).upper(),
            "sub_nuggets": [_child_out(query_id, c) for c in structure["children"]],
        }
    return _compact(out)


def nugget_banks(session: Session, collection: Collection, number: int) -> list[dict[str, Any]]:
    """Rubric version ``number`` as NuggetBanks v3 banks, one per query in the collection's query order.

    Questions go to ``nugget_bank`` and nuggets to ``claim_bank``, keyed by their text as
    autojudge_base keys them; an explicit weight travels as ``metadata.weight``.
    """
    version = version_by_number(session, collection, number)
    rows = session.execute(
        select(BankItem, Query)
        .join(RubricVersionItem, RubricVersionItem.item_pk == BankItem.id)
        .join(Query, Query.id == BankItem.query_pk)
        .where(RubricVersionItem.version_pk == version.id)
        .order_by(Query.position, RubricVersionItem.position)
    ).all()
    first = _first_versions(session, collection)
    banks: dict[str, dict[str, Any]] = {}
    for item, query in rows:
        envelope = version.bank_meta.get(f"{item.kind}:{query.query_id}") or {}
        bank = banks.setdefault(
            query.query_id,
            _compact(
                {
                    "format_version": "v3",
                    "query_id": query.query_id,
                    "title_query": query.text or None,
                    "test_collection": envelope.get("test_collection"),
                    "metadata": envelope.get("info") if isinstance(envelope.get("info"), dict) else None,
                }
            ),
        )
        nugget = _nugget_out(query.query_id, item, item_creator(item, first.get(item.id)))
        section = "nugget_bank" if item.kind == "question" else "claim_bank"
        bank.setdefault(section, {})[item.text] = nugget
    return list(banks.values())


def write_nugget_banks(session: Session, collection: Collection, number: int, out: Path) -> int:
    """Write rubric version ``number`` as NuggetBanks v3 JSONL (gzip when ``out`` ends in .gz); banks written."""
    banks = nugget_banks(session, collection, number)
    text = "".join(json.dumps(bank, ensure_ascii=False) + "\n" for bank in banks)
    try:  # a path that cannot be written (a directory, no such folder, no permission) is the user's mistake
        if out.name.endswith(".gz"):
            with gzip.open(out, "wt", encoding="utf-8") as handle:
                handle.write(text)
        else:
            out.write_text(text, encoding="utf-8")
    except OSError as error:
        raise Invalid(f"cannot write {str(out)[:200]!r}: {error.strerror or error}") from error
    return len(banks)
