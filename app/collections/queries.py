"""Read side: load a collection into the plain structures of ``app.evaluation``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from app.errors import Invalid
from app.evaluation.oversight import BankEntry
from app.evaluation.types import Judgments
from app.models import (
    BankItem,
    Collection,
    Grade,
    GradeOverride,
    Grader,
    Judgment,
    Passage,
    PoolEntry,
    Query,
    RubricVersion,
    RubricVersionItem,
)

AnySelect = TypeVar("AnySelect", bound="Select[*tuple[Any, ...]]")


class GraderSelectionError(Invalid):
    """No grader, or more than one, matches the requested model and prompt class."""


class GraderLike(Protocol):
    @property
    def model(self) -> str: ...
    @property
    def prompt_class(self) -> str: ...
    @property
    def template_hash(self) -> str: ...


AnyGrader = TypeVar("AnyGrader", bound=GraderLike)


@dataclass(frozen=True, slots=True)
class GraderRef:
    """A grader configuration as plain values, safe to keep beyond the session that loaded it."""

    id: int
    model: str
    prompt_class: str
    prompt_type: str
    template_hash: str
    is_self_rated: bool
    settings: str = ""  # what tells it apart from graders of equal model and prompt class (grader_settings)

    @classmethod
    def of(cls, grader: Grader) -> GraderRef:
        return cls(
            grader.id,
            grader.model,
            grader.prompt_class,
            grader.prompt_type,
            grader.template_hash,
            grader.is_self_rated,
            grader_settings(grader.identity or {}),
        )


def grader_settings(identity: dict[str, Any]) -> str:
    """A short description of a grader's identity: ``openai chat score @ host, seed 7``, ``hf score``.

    Names the backend, endpoint, mode and host, and the decoding settings that were set; a grader
    made before identities were recorded says so. Two graders of one model and prompt class read apart.
    """
    if not identity or identity.get("legacy"):
        return "settings not recorded"
    backend = str(identity.get("backend", "?"))
    if backend == "imported":
        options = identity.get("llm_options") or {}
        shown = ", ".join(f"{k}={v}" for k, v in sorted(options.items()))
        return f"imported, {shown[:80]}" if shown else "imported"
    words = [backend, str(identity.get("endpoint") or ""), str(identity.get("mode") or "")]
    text = " ".join(dict.fromkeys(w for w in words if w))  # "similarity", not "similarity similarity"
    if identity.get("base_url"):
        text += f" @ {identity['base_url']}"
    extras = [f"{label} {identity[key]}" for key, label in _SHOWN if identity.get(key) not in (None, "auto")]
    if identity.get("json_mode"):
        extras.append("JSON mode")
    return ", ".join([text, *extras])


# decoding settings named when set (None, or "auto" for dtype, means the default)
_SHOWN = (
    ("seed", "seed"),
    ("max_new_tokens", "max new tokens"),
    ("max_output_tokens", "max new tokens"),
    ("num_beams", "beams"),
    ("dtype", "dtype"),
    ("top_logprobs", "top-k"),
)


def describe_grader(grader: GraderLike) -> str:
    return f"model={grader.model} prompt-class={grader.prompt_class} template={grader.template_hash[:20]}"


def graders_of(session: Session, collection: Collection) -> list[Grader]:
    """Grader configurations that have grades in the collection."""
    pks = select(Grade.grader_pk).where(Grade.collection_id == collection.id).distinct()
    return list(session.scalars(select(Grader).where(Grader.id.in_(pks)).order_by(Grader.id)))


def match_grader(available: Sequence[AnyGrader], *, model: str | None, prompt_class: str | None) -> AnyGrader:
    """The one grader in ``available`` that matches the filters (GradeFilter)."""
    matching = [
        g
        for g in available
        if (model is None or g.model == model) and (prompt_class is None or g.prompt_class == prompt_class)
    ]
    if len(matching) == 1:
        return matching[0]
    listing = "; ".join(describe_grader(g) for g in available) or "none"
    if not matching:
        raise GraderSelectionError(f"no grades match model={model} prompt-class={prompt_class}. Available: {listing}")
    raise GraderSelectionError(
        f"{len(matching)} grader configurations match; narrow with --model/--prompt-class. Available: {listing}"
    )


class PoolKeys:
    """pool entry pk → (query id, passage id), for one collection.

    ``keys`` may be given as a function that builds the mapping: a snapshot keeps its pool as
    arrays and builds this per-entry dict only for the readers that ask (overrides, judgments).
    """

    __slots__ = ("_build", "_keys", "collection_id")

    def __init__(
        self, collection_id: int, keys: dict[int, tuple[str, str]] | Callable[[], dict[int, tuple[str, str]]]
    ) -> None:
        self.collection_id = collection_id
        self._keys = keys if isinstance(keys, dict) else None
        self._build = None if isinstance(keys, dict) else keys

    @property
    def keys(self) -> dict[int, tuple[str, str]]:
        if self._keys is None:
            assert self._build is not None
            self._keys = self._build()
        return self._keys

    @property
    def built(self) -> bool:
        return self._keys is not None


def _in_collection(statement: AnySelect, entry_column: Any, pool: PoolKeys) -> AnySelect:
    return (
        statement.join(PoolEntry, PoolEntry.id == entry_column)
        .join(Query, Query.id == PoolEntry.query_pk)
        .where(Query.collection_id == pool.collection_id)
    )


def pool_keys(session: Session, collection: Collection) -> PoolKeys:
    rows = session.execute(
        select(PoolEntry.id, Query.query_id, Passage.passage_id)
        .join(Query, Query.id == PoolEntry.query_pk)
        .join(Passage, Passage.id == PoolEntry.passage_pk)
        .where(Query.collection_id == collection.id)
        .order_by(Query.position, PoolEntry.position)
    )
    return PoolKeys(collection.id, {pk: (qid, pid) for pk, qid, pid in rows})


def version_item_ids(session: Session, version: RubricVersion) -> set[str]:
    return set(
        session.scalars(
            select(BankItem.item_id)
            .join(RubricVersionItem, RubricVersionItem.item_pk == BankItem.id)
            .where(RubricVersionItem.version_pk == version.id)
        )
    )


def load_overrides(session: Session, pool: PoolKeys) -> dict[int, dict[str, int]]:
    """Judges' grade overrides: pool entry → item id → rating."""
    result: dict[int, dict[str, int]] = defaultdict(dict)
    rows = session.execute(
        _in_collection(
            select(GradeOverride.pool_entry_pk, GradeOverride.item_id, GradeOverride.rating),
            GradeOverride.pool_entry_pk,
            pool,
        )
    ).all()
    for entry_pk, item_id, rating in rows:
        result[entry_pk][item_id] = rating
    return result


def load_judgments(session: Session, pool: PoolKeys) -> Judgments:
    """query → passage → judgments (in stored order), read now.

    A reader that asks often (a leaderboard fragment) uses ``snapshot.manual_judgments``, kept
    under the collection's judgments token, instead.
    """
    result: dict[str, dict[str, list[int]]] = {}
    statement = _in_collection(
        select(Judgment.pool_entry_pk, Judgment.relevance), Judgment.pool_entry_pk, pool
    ).order_by(Judgment.pool_entry_pk, Judgment.ordinal)
    rows = session.connection().execute(statement).all()  # Core rows: the ORM's loading step costs more than the fetch
    for entry_pk, relevance in rows:
        query_id, passage_id = pool.keys[entry_pk]
        result.setdefault(query_id, {}).setdefault(passage_id, []).append(relevance)
    return result


def load_answers(session: Session, pool: PoolKeys, grader_pk: int) -> dict[str, dict[str, dict[str, list[str]]]]:
    """query → passage → item → answers (extracted answer if stored, else the raw answer)."""
    result: dict[str, dict[str, dict[str, list[str]]]] = {}
    rows = session.execute(
        _in_collection(
            select(Grade.pool_entry_pk, Grade.item_id, Grade.extracted_answer, Grade.raw_answer),
            Grade.pool_entry_pk,
            pool,
        ).where(Grade.grader_pk == grader_pk)
    ).all()
    for entry_pk, item_id, extracted, raw in rows:
        answer = extracted if extracted is not None else raw
        if answer is None:
            continue
        query_id, passage_id = pool.keys[entry_pk]
        result.setdefault(query_id, {}).setdefault(passage_id, {}).setdefault(item_id, []).append(answer)
    return result


IN_CHUNK = 500  # keys per IN (...) list: far below SQLite's and PostgreSQL's parameter limits


def _chunks(values: Sequence[Any]) -> list[Sequence[Any]]:
    return [values[i : i + IN_CHUNK] for i in range(0, len(values), IN_CHUNK)]


def load_answers_of(session: Session, grader_pk: int, cells: Sequence[tuple[int, str]]) -> dict[tuple[int, str], str]:
    """(pool entry pk, item id) → answer (extracted if stored, else raw) for just these cells: a page's rows."""
    wanted = set(cells)
    result: dict[tuple[int, str], str] = {}
    for chunk in _chunks(sorted({entry for entry, _ in wanted})):
        rows = session.execute(
            select(Grade.pool_entry_pk, Grade.item_id, Grade.extracted_answer, Grade.raw_answer).where(
                Grade.grader_pk == grader_pk, Grade.pool_entry_pk.in_(chunk)
            )
        ).all()
        for entry_pk, item_id, extracted, raw in rows:
            answer = extracted if extracted is not None else raw
            if (entry_pk, item_id) in wanted and answer is not None:
                result[(entry_pk, item_id)] = answer
    return result


def load_texts_of(session: Session, collection: Collection, passage_ids: Sequence[str]) -> dict[str, str]:
    """Passage id → text for just these passages (a page's rows)."""
    result: dict[str, str] = {}
    for chunk in _chunks(sorted(set(passage_ids))):
        rows = session.execute(
            select(Passage.passage_id, Passage.text).where(
                Passage.collection_id == collection.id, Passage.passage_id.in_(chunk)
            )
        ).all()
        result.update((pid, text or "") for pid, text in rows)
    return result


def load_texts(session: Session, collection: Collection) -> dict[str, str]:
    rows = session.execute(select(Passage.passage_id, Passage.text).where(Passage.collection_id == collection.id)).all()
    return {pid: text or "" for pid, text in rows}


def load_bank(session: Session, version: RubricVersion | None) -> dict[str, list[BankEntry]]:
    """query id → bank entries of a rubric version, in version order."""
    if version is None:
        return {}
    rows = session.execute(
        select(Query.query_id, BankItem.item_id, BankItem.text)
        .join(RubricVersionItem, RubricVersionItem.item_pk == BankItem.id)
        .join(Query, Query.id == BankItem.query_pk)
        .where(RubricVersionItem.version_pk == version.id)
        .order_by(RubricVersionItem.position)
    ).all()
    result: dict[str, list[BankEntry]] = {}
    for query_id, item_id, text in rows:
        result.setdefault(query_id, []).append(BankEntry(item_id, text))
    return result
