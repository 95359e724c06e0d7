"""Generated system responses (RAG answers) as rankings of passages.

A response is cut into passages of about 400 tokens at sentence boundaries; passage ``k`` of
system ``S`` for query ``Q`` gets the stable id ``S:Q:k`` and rank ``k + 1``, so the evaluation
treats a response like a ranked list. Two inputs are read:

* TREC RAG 24 answer JSONL: one line per (run, topic) with ``run_id``, ``topic_id`` and
  ``answer`` (a list of ``{"text", "citations"}`` sentences);
* plain text: ``DIR/<system>/<query_id>.txt``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session

from app.collections.errors import ImportFormatError
from app.collections.readers import RunLine, check_length, iter_lines, load_json
from app.collections.schemas import PASSAGE_ID_MAX, SYSTEM_NAME_MAX
from app.collections.service import CollectionWriter, ImportReport, _write_ranked_lines
from app.models import Collection

SEGMENT_TOKENS = 400
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_TOKEN = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True, slots=True)
class Response:
    file: str
    line: int
    system: str
    query_id: str
    text: str


def token_count(text: str) -> int:
    """Approximate tokens: words and punctuation marks (a subword tokenizer gives about 1.2× more)."""
    return len(_TOKEN.findall(text))


def segment(text: str, max_tokens: int = SEGMENT_TOKENS) -> list[str]:
    """Greedy sentence packing into segments of at most ``max_tokens``; an overlong sentence is cut by words."""
    segments: list[str] = []
    current: list[str] = []
    size = 0
    for sentence in _pieces(text, max_tokens):
        n = token_count(sentence)
        if current and size + n > max_tokens:
            segments.append(" ".join(current))
            current, size = [], 0
        current.append(sentence)
        size += n
    if current:
        segments.append(" ".join(current))
    return segments


def _pieces(text: str, max_tokens: int) -> Iterator[str]:
    for sentence in _SENTENCE_END.split(text.strip()):
        if not sentence:
            continue
        if token_count(sentence) <= max_tokens:
            yield sentence
            continue
        words = sentence.split()
        chunk: list[str] = []
        for word in words:
            if chunk and token_count(" ".join([*chunk, word])) > max_tokens:
                yield " ".join(chunk)
                chunk = []
            chunk.append(word)
        if chunk:
            yield " ".join(chunk)


def read_rag24(path: Path) -> Iterator[Response]:
    file = str(path)
    for line, raw in iter_lines(path):
        record = load_json(file, line, raw)
        if not isinstance(record, dict):
            raise ImportFormatError(file, line, "(record)", "expected a JSON object")
        for field in ("run_id", "topic_id", "answer"):
            if field not in record:
                raise ImportFormatError(file, line, field, "missing")
        answer = record["answer"]
        if not isinstance(answer, list) or not all(
            isinstance(s, dict) and isinstance(s.get("text"), str) for s in answer
        ):
            raise ImportFormatError(file, line, "answer", "expected a list of {text, citations} objects")
        text = " ".join(s["text"].strip() for s in answer)
        system = check_length(str(record["run_id"]), SYSTEM_NAME_MAX, file, line, "run_id")
        yield Response(file, line, system, str(record["topic_id"]), text)


def read_text_dir(directory: Path) -> Iterator[Response]:
    for system_dir in sorted(p for p in directory.iterdir() if p.is_dir()):
        system = check_length(system_dir.name, SYSTEM_NAME_MAX, str(system_dir), None, "system")
        for path in sorted(system_dir.glob("*.txt")):
            text = "".join(line for _, line in iter_lines(path))  # UTF-8, no NUL, not empty
            yield Response(str(path), 1, system, path.stem, text)


def import_responses(session: Session, collection: Collection, path: Path) -> ImportReport:
    """Import generated responses (RAG24 JSONL or a text directory) as segmented, ranked passages."""
    writer = CollectionWriter(session, collection)
    responses = list(read_text_dir(path) if path.is_dir() else read_rag24(path))
    if not responses:
        raise ImportFormatError(str(path), None, "(file)", "no responses found")
    seen: set[tuple[str, str]] = set()
    by_system: dict[str, list[RunLine]] = {}
    for response in responses:
        key = (response.system, response.query_id)
        if key in seen:
            raise ImportFormatError(response.file, response.line, "topic_id", f"second response for {key}")
        seen.add(key)
        writer.known_query(response.query_id, response.file, response.line)
        segments = segment(response.text)
        ids = {f"{response.system}:{response.query_id}:{k}": text for k, text in enumerate(segments)}
        for passage_id in ids:
            check_length(passage_id, PASSAGE_ID_MAX, response.file, response.line, "passage id (system:query:k)")
        writer.ensure_passages(dict(ids), response.file, dict.fromkeys(ids, response.line))
        by_system.setdefault(response.system, []).extend(
            RunLine(response.line, response.query_id, pid, k + 1, float(-k), response.system)
            for k, pid in enumerate(ids)
        )
    for system, lines in by_system.items():
        _write_ranked_lines(writer, lines, writer.ensure_system(system), str(path))
    session.flush()
    return writer.report
