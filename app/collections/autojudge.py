"""TREC AutoJudge inputs (docs/formats.md): Request topics, Report RAG outputs with citations, and graded
qrels of other judges.

* A **Request** (``autojudge_base.Request``, JSONL) becomes a query: ``request_id`` its id, ``title``
  its text, the rest (background, problem statement, limits, collection ids) its ``info``.
* A **Report** (``autojudge_base.Report``, JSONL, one per run and topic) becomes a system's
  response, segmented into passages ``run:topic:k`` of about 400 tokens as generated responses
  are (app/collections/responses.py), but cut only between the report's sentences, so that each
  passage links to the documents its sentences cite (``citation`` rows, in citation order). The
  three sentence shapes are read: ``{doc_id: confidence}`` (ragtime, by descending confidence),
  ``[doc_id]`` (neuclir) and ``[index into references]`` (rag24).
* **Graded qrels of another judge** (TREC qrels, e.g. UMBRELA's 0-3) become ``external_judgment``
  rows of a named source, beside the manual judgments, which stay the truth.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr
from sqlalchemy import delete, insert
from sqlalchemy.orm import Session

from app.collections.errors import ImportFormatError
from app.collections.nuggets_io import validated
from app.collections.readers import RunLine, check_length, iter_lines, load_json
from app.collections.responses import SEGMENT_TOKENS, segment, token_count
from app.collections.schemas import PASSAGE_ID_MAX, QUERY_ID_MAX, SYSTEM_NAME_MAX
from app.collections.service import CollectionWriter, ImportReport, _write_ranked_lines, pooled_qrels
from app.errors import Invalid
from app.models import Citation, Collection, ExternalJudgment, Query
from app.sqlutil import upsert

DOC_ID_MAX = 300  # Citation.doc_id
SOURCE_MAX = 200  # ExternalJudgment.source
_SOURCE = re.compile(r"^[^\x00-\x1f\x7f]+$")


class _In(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


Id = Annotated[StrictStr, Field(min_length=1, max_length=QUERY_ID_MAX)] | StrictInt


class RequestIn(_In):
    request_id: Id
    title: StrictStr
    collection_ids: list[StrictStr] | None = None
    background: StrictStr | None = None
    original_background: StrictStr | None = None
    problem_statement: StrictStr | None = None
    limit: StrictInt | None = None
    word_limit: StrictInt | None = None


class SentenceIn(_In):
    text: StrictStr
    citations: dict[StrictStr, StrictFloat | StrictInt] | list[StrictStr] | list[StrictInt] | None = None


class ReportMetaIn(_In):
    # a system name: a TREC run file's sixth column and an export's file name, so no whitespace
    run_id: Annotated[StrictStr, Field(min_length=1, max_length=SYSTEM_NAME_MAX, pattern=r"^\S+$")]
    team_id: StrictStr | None = None
    topic_id: Id | None = None
    narrative_id: Id | None = None
    request_id: Id | None = None
    narrative: StrictStr | None = None


class ReportIn(_In):
    metadata: ReportMetaIn
    responses: list[SentenceIn] | None = None
    answer: list[SentenceIn] | None = None
    references: list[StrictStr] | None = None


def _objects(path: Path) -> Iterator[tuple[int, Any]]:
    for line, raw in iter_lines(path):
        record = load_json(str(path), line, raw)
        if not isinstance(record, dict):
            raise ImportFormatError(str(path), line, None, "expected a JSON object")
        yield line, record


# -- requests -----------------------------------------------------------------------------------------


def import_requests(session: Session, collection: Collection, path: Path) -> ImportReport:
    """AutoJudge Requests (JSONL) as queries: the title is the text (replacing it), the rest the ``info``."""
    writer = CollectionWriter(session, collection)
    file = str(path)
    seen: set[str] = set()
    for line, record in _objects(path):
        request: RequestIn = validated(RequestIn, record, file, line)
        query_id = str(request.request_id)
        if query_id in seen:
            raise ImportFormatError(file, line, "request_id", f"second request {query_id!r}")
        seen.add(query_id)
        known = query_id in writer.query_pks
        query = session.get_one(Query, writer.ensure_query(query_id, request.title))
        info = request.model_dump(exclude={"request_id", "title"}, exclude_none=True) or None
        if (query.text, query.info) != (request.title, info):
            query.text, query.info = request.title, info
            writer.report.add("queries", int(known))  # a new query is counted once, by ensure_query
    session.flush()
    return writer.report


# -- reports ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CitedSentence:
    text: str
    citations: tuple[tuple[str, float | None], ...]  # (doc id, confidence), in priority order


@dataclass(frozen=True, slots=True)
class ReportResponse:
    file: str
    line: int
    system: str
    query_id: str
    query_text: str | None
    sentences: tuple[CitedSentence, ...]


def _citations(sentence: SentenceIn, references: list[str], file: str, line: int, field: str) -> list[Any]:
    cited = sentence.citations
    if cited is None:
        return []
    if isinstance(cited, dict):  # ragtime: by descending confidence, ties in file order
        ranked = sorted(cited.items(), key=lambda pair: -pair[1])
        pairs: list[tuple[str, float | None]] = [(doc, float(conf)) for doc, conf in ranked]
    elif all(isinstance(c, int) for c in cited):  # rag24: indices into the report's references
        pairs = []
        for index in cited:
            if not 0 <= int(index) < len(references):
                raise ImportFormatError(
                    file, line, f"{field}.citations", f"citation {index} is not an index into references"
                )
            pairs.append((references[int(index)], None))
    else:
        pairs = [(str(doc), None) for doc in cited]
    for doc, _ in pairs:
        check_length(doc, DOC_ID_MAX, file, line, f"{field}.citations")
    return pairs


def read_reports(path: Path) -> Iterator[ReportResponse]:
    """Reports of a JSONL file, or of every ``*.jsonl[.gz]`` file of a directory (in name order)."""
    files = sorted(p for p in path.iterdir() if p.is_file() and ".jsonl" in p.name) if path.is_dir() else [path]
    if not files:
        raise ImportFormatError(str(path), None, None, "no *.jsonl report files in the directory")
    for report_path in files:
        file = str(report_path)
        for line, record in _objects(report_path):
            report: ReportIn = validated(ReportIn, record, file, line)
            meta = report.metadata
            topic = meta.topic_id if meta.topic_id is not None else (meta.narrative_id or meta.request_id)
            if topic is None or str(topic) == "":
                raise ImportFormatError(file, line, "metadata.topic_id", "a report needs topic_id (or narrative_id)")
            sentences = report.responses if report.responses is not None else report.answer
            if sentences is None:
                raise ImportFormatError(file, line, "responses", "a report needs responses (or answer)")
            references = report.references or []
            field = "responses" if report.responses is not None else "answer"
            cited = tuple(
                CitedSentence(s.text.strip(), tuple(_citations(s, references, file, line, f"{field}[{i}]")))
                for i, s in enumerate(sentences)
            )
            yield ReportResponse(file, line, meta.run_id, str(topic), meta.narrative, cited)


def segment_sentences(sentences: tuple[CitedSentence, ...]) -> list[tuple[str, list[int]]]:
    """Passages of at most ``SEGMENT_TOKENS`` tokens, cut between sentences: (text, the sentences it holds).

    Greedy packing as ``segment`` does; a sentence longer than a passage is cut by ``segment`` and
    each piece keeps the sentence's citations.
    """
    passages: list[tuple[str, list[int]]] = []
    current: list[str] = []
    indices: list[int] = []
    size = 0
    for index, sentence in enumerate(sentences):
        for piece in segment(sentence.text) if sentence.text else []:
            n = token_count(piece)
            if current and size + n > SEGMENT_TOKENS:
                passages.append((" ".join(current), indices))
                current, indices, size = [], [], 0
            current.append(piece)
            size += n
            if index not in indices:
                indices.append(index)
    if current:
        passages.append((" ".join(current), indices))
    return passages


def import_reports(session: Session, collection: Collection, path: Path) -> ImportReport:
    """Import AutoJudge Reports as systems' segmented responses with their citations (replacing stored ones)."""
    writer = CollectionWriter(session, collection)
    responses = list(read_reports(path))
    seen: set[tuple[str, str]] = set()
    by_system: dict[str, list[RunLine]] = {}
    citations: dict[str, list[tuple[str, float | None, int]]] = {}
    passage_pks: dict[str, int] = {}
    for response in responses:
        key = (response.system, response.query_id)
        if key in seen:
            raise ImportFormatError(response.file, response.line, "metadata.topic_id", f"second report for {key}")
        seen.add(key)
        check_length(response.query_id, QUERY_ID_MAX, response.file, response.line, "metadata.topic_id")
        if response.query_text:
            writer.ensure_query(response.query_id, response.query_text)
        writer.known_query(response.query_id, response.file, response.line)
        passages = segment_sentences(response.sentences)
        if not passages:
            raise ImportFormatError(response.file, response.line, "responses", "the report has no text")
        ids = {f"{response.system}:{response.query_id}:{k}": text for k, (text, _) in enumerate(passages)}
        for passage_id, (_, indices) in zip(ids, passages, strict=True):
            check_length(passage_id, PASSAGE_ID_MAX, response.file, response.line, "passage id (run:topic:k)")
            citations[passage_id] = [
                (doc, confidence, i) for i in indices for doc, confidence in response.sentences[i].citations
            ]
        passage_pks |= writer.ensure_passages(dict(ids), response.file, dict.fromkeys(ids, response.line))
        by_system.setdefault(response.system, []).extend(
            RunLine(response.line, response.query_id, pid, k + 1, float(-k), response.system)
            for k, pid in enumerate(ids)
        )
    for system, lines in by_system.items():
        _write_ranked_lines(writer, lines, writer.ensure_system(system), str(path))
    _replace_citations(writer, {passage_pks[pid]: cited for pid, cited in citations.items()})
    session.flush()
    return writer.report


def _replace_citations(writer: CollectionWriter, citations: dict[int, list[tuple[str, float | None, int]]]) -> None:
    """Passage pk → (doc id, confidence, sentence) in citation order: the passages' citations, replaced."""
    writer.session.execute(delete(Citation).where(Citation.passage_pk.in_(list(citations))))
    rows = [
        {
            "collection_id": writer.collection.id,
            "passage_pk": passage_pk,
            "doc_id": doc,
            "position": position,
            "sentence": sentence,
            "confidence": confidence,
        }
        for passage_pk, cited in citations.items()
        for position, (doc, confidence, sentence) in enumerate(cited)
    ]
    if rows:
        writer.session.execute(insert(Citation), rows)
    writer.report.add("citations", len(rows))


# -- graded qrels of another judge ---------------------------------------------------------------------


def judge_source(name: str) -> str:
    """A judgment source's name, as given after ``--judgments-from`` (``NAME=FILE``)."""
    name = name.strip()
    if not name or len(name) > SOURCE_MAX or not _SOURCE.match(name):
        raise Invalid(f"a judge's name must be 1 to {SOURCE_MAX} printable characters, got {name[:40]!r}")
    if name == "manual":
        raise Invalid("'manual' names the collection's own judgments: give the other judge another name")
    return name


def import_judgments_from(session: Session, collection: Collection, source: str, path: Path) -> ImportReport:
    """Graded qrels of judge ``source`` (TREC qrels, any integer grades): its judgments, replaced per passage."""
    source = judge_source(source)
    writer = CollectionWriter(session, collection)
    rows = [
        {"collection_id": collection.id, "pool_entry_pk": entry, "source": source, "relevance": line.relevance}
        for line, entry in pooled_qrels(writer, path)
    ]
    upsert(session, ExternalJudgment, rows, keys=("source", "pool_entry_pk"), update=("relevance",))
    writer.report.add(f"judgments of {source}", len(rows))
    session.flush()
    return writer.report
