"""Streaming readers for every input format. Each bad record raises ImportFormatError(file, line, field).

What a database cannot store is refused here, the same way on SQLite and PostgreSQL: NUL
characters, strings longer than their column, integers outside their column, NaN and ±Infinity.
JSON nested deeper than ``MAX_JSON_DEPTH`` is refused before the parser can recurse on it.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from app.collections.errors import ImportFormatError
from app.collections.limits import open_gzip
from app.collections.schemas import (
    INT32_MAX,
    PASSAGE_ID_MAX,
    QUERY_ID_MAX,
    RELEVANCE_MAX,
    RELEVANCE_MIN,
    SYSTEM_NAME_MAX,
    BankIn,
    ParagraphIn,
)

_GZIP_MAGIC = b"\x1f\x8b"
_PARAGRAPHS = TypeAdapter(list[ParagraphIn])
MAX_JSON_DEPTH = 32
# Byte classes for json_depth_exceeds: brackets, quotes and backslashes; everything else is 0.
_OPEN, _CLOSE, _QUOTE, _BACKSLASH = 1, 2, 3, 4
_BYTE_KIND = bytearray(256)
for _chars, _kind in (("[{", _OPEN), ("]}", _CLOSE), ('"', _QUOTE), ("\\", _BACKSLASH)):
    for _char in _chars:
        _BYTE_KIND[ord(_char)] = _kind


def _is_gzip(path: Path) -> bool:
    with path.open("rb") as handle:
        return handle.read(2) == _GZIP_MAGIC


def iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of a plain or gzip text file; blank lines are skipped; an empty file is an error."""
    name = str(path)
    if not path.is_file():
        raise ImportFormatError(name, None, None, "file not found")
    opener = open_gzip if _is_gzip(path) else open  # a gzip file may not inflate past the limit
    line_no = 0
    seen_content = False
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            for line_no, line in enumerate(handle, start=1):  # noqa: B007 - used after the loop
                if "\x00" in line:
                    raise ImportFormatError(name, line_no, None, "contains a NUL character")
                if line.strip():
                    seen_content = True
                    yield line_no, line
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise ImportFormatError(name, line_no + 1, None, f"corrupt or truncated gzip data ({exc})") from exc
    except UnicodeDecodeError as exc:
        raise ImportFormatError(name, line_no + 1, None, f"not UTF-8 text ({exc.reason})") from exc
    if not seen_content:
        raise ImportFormatError(name, None, None, "file is empty")


def _loc(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def validate(model: type[BaseModel], data: Any, file: str, line: int, prefix: str = "") -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = prefix + _loc(tuple(first["loc"]))
        raise ImportFormatError(file, line, field or None, first["msg"]) from None


class _NonFinite(ValueError):
    pass


def _reject_constant(name: str) -> float:
    raise _NonFinite(f"{name} is not a number this file may hold")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFinite(f"{text} overflows a float")
    return value


def json_depth_exceeds(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether JSON ``text`` nests arrays/objects deeper than ``limit``, without parsing it.

    Vectorised over the UTF-8 bytes, each classed by one ``bytes.translate`` (a multi-byte
    character never contains an ASCII byte): a quote after an even run of backslashes opens or
    closes a string, brackets inside strings are ignored, and every other bracket is a step of
    +1 or -1 whose largest running sum is the depth. Malformed text is left to the parser.
    """
    import numpy as np  # lazily: most commands never read JSON

    kind = np.frombuffer(text.encode("utf-8").translate(_BYTE_KIND), dtype=np.uint8)
    if kind.size <= limit:
        return False
    quote = kind == _QUOTE
    backslash = kind == _BACKSLASH
    if backslash.any():
        positions = np.arange(kind.size, dtype=np.int64)
        last_other = np.maximum.accumulate(np.where(backslash, -1, positions))
        run = np.zeros(kind.size, dtype=np.int64)  # backslashes just before each byte
        run[1:] = positions[:-1] - last_other[:-1]
        quote &= (run & 1) == 0
    inside = np.bitwise_xor.accumulate(quote.view(np.uint8)).view(bool)
    steps = (kind == _OPEN).view(np.int8) - (kind == _CLOSE).view(np.int8)
    steps[inside] = 0
    return bool(steps.cumsum(dtype=np.int64).max() > limit)


def _nul_path(value: Any, path: str = "") -> str | None:
    """The location of the first string (or key) holding a NUL character; depth is bounded already."""
    if isinstance(value, str):
        return (path or "(value)") if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if "\x00" in key:
                return where
            found = _nul_path(item, where)
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _nul_path(item, f"{path}[{index}]")
            if found:
                return found
    return None


def load_json(file: str, line_no: int | None, text: str) -> Any:
    """``json.loads`` for untrusted text: bounded depth, finite numbers, no NUL; errors are located."""
    if json_depth_exceeds(text):
        raise ImportFormatError(file, line_no, None, f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        where = line_no if line_no is not None else exc.lineno
        raise ImportFormatError(file, where, None, f"invalid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:  # unbalanced brackets, which the depth check leaves to the parser
        raise ImportFormatError(file, line_no, None, f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:  # NaN/Infinity, a float overflow, an int over 4300 digits
        raise ImportFormatError(file, line_no, None, f"invalid number ({exc})") from None
    if "\\u0000" in text:
        field = _nul_path(value)
        if field is not None:
            raise ImportFormatError(file, line_no, field, "contains a NUL character")
    return value


def parse_json_line(file: str, line_no: int, line: str) -> Any:
    return load_json(file, line_no, line)


def check_length(value: str, limit: int, file: str, line: int | None, field: str) -> str:
    """``value`` if it fits its ``String(limit)`` column, else an ImportFormatError naming the field."""
    if len(value) > limit:
        raise ImportFormatError(file, line, field, f"longer than {limit} characters ({len(value)})")
    return value


@dataclass(frozen=True, slots=True)
class InterchangeLine:
    line: int
    query_id: str
    paragraphs: list[ParagraphIn]


def read_interchange(path: Path) -> Iterator[InterchangeLine]:
    """``[query_id, [paragraph, …]]`` per line (spec §4.1); numeric query ids become strings."""
    name = str(path)
    for line_no, line in iter_lines(path):
        record = parse_json_line(name, line_no, line)
        if not (isinstance(record, list) and len(record) == 2 and isinstance(record[1], list)):
            raise ImportFormatError(name, line_no, None, "expected [query_id, [paragraph, …]]")
        query_id = record[0]
        if isinstance(query_id, bool) or not isinstance(query_id, str | int) or str(query_id) == "":
            raise ImportFormatError(name, line_no, "query_id", "expected a non-empty string")
        check_length(str(query_id), QUERY_ID_MAX, name, line_no, "query_id")
        yield InterchangeLine(line_no, str(query_id), _paragraphs(record[1], name, line_no))


def _paragraphs(raw: list[Any], file: str, line: int) -> list[ParagraphIn]:
    """Validate a line's paragraphs in one call (a per-paragraph call costs a third more)."""
    try:
        paragraphs: list[ParagraphIn] = _PARAGRAPHS.validate_python(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        index, *loc = first["loc"]
        item = raw[int(index)]
        paragraph_id = item.get("paragraph_id") if isinstance(item, dict) else None
        prefix = f"paragraphs[{index}]" + (f"(id={paragraph_id})" if paragraph_id else "") + "."
        raise ImportFormatError(file, line, prefix + _loc(tuple(loc)), first["msg"]) from None
    return paragraphs


def read_banks(path: Path) -> Iterator[tuple[int, BankIn]]:
    """Test-bank lines: the "items" format, the legacy "questions" format, or flat TQA question rows."""
    name = str(path)
    for line_no, line in iter_lines(path):
        record = parse_json_line(name, line_no, line)
        if isinstance(record, dict) and "qid" in record and "question" in record:
            record = _flat_question_as_bank(record)
        if not isinstance(record, dict):
            raise ImportFormatError(name, line_no, None, "expected a JSON object per line")
        bank: BankIn = validate(BankIn, record, name, line_no)
        if bank.items is None and bank.questions is None:
            raise ImportFormatError(name, line_no, "items", "a bank line needs 'items' or 'questions'")
        yield line_no, bank


def _flat_question_as_bank(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "query_id": record.get("query_id"),
        "query_text": record.get("query_text") or "",
        "facet_id": record.get("facet_id"),
        "items": [
            {
                "query_id": record.get("query_id"),
                "facet_id": record.get("facet_id"),
                "question_id": record.get("qid"),
                "question_text": record.get("question"),
                "gold_answers": [record["correct"]] if isinstance(record.get("correct"), str) else None,
            }
        ],
    }


@dataclass(frozen=True, slots=True)
class RunLine:
    line: int
    query_id: str
    passage_id: str
    rank: int
    score: float
    tag: str


def read_run(path: Path) -> Iterator[RunLine]:
    """TREC run lines: ``qid Q0 docno rank score tag``."""
    name = str(path)
    fields = ("query_id", "Q0", "docno", "rank", "score", "tag")
    for line_no, line in iter_lines(path):
        parts = line.split()
        if len(parts) != 6:
            raise ImportFormatError(name, line_no, None, f"expected 6 columns ({' '.join(fields)}), got {len(parts)}")
        query_id = check_length(parts[0], QUERY_ID_MAX, name, line_no, "query_id")
        docno = check_length(parts[2], PASSAGE_ID_MAX, name, line_no, "docno")
        tag = check_length(parts[5], SYSTEM_NAME_MAX, name, line_no, "tag")
        rank = _integer(parts[3], name, line_no, "rank", 0, INT32_MAX)
        score = _number(float, parts[4], name, line_no, "score")
        yield RunLine(line_no, query_id, docno, rank, score, tag)


@dataclass(frozen=True, slots=True)
class QrelsLine:
    line: int
    query_id: str
    passage_id: str
    relevance: int


def read_qrels(path: Path) -> Iterator[QrelsLine]:
    """TREC qrels lines: ``qid iter docno rel``."""
    name = str(path)
    for line_no, line in iter_lines(path):
        parts = line.split()
        if len(parts) != 4:
            raise ImportFormatError(name, line_no, None, f"expected 4 columns (qid iter docno rel), got {len(parts)}")
        query_id = check_length(parts[0], QUERY_ID_MAX, name, line_no, "query_id")
        docno = check_length(parts[2], PASSAGE_ID_MAX, name, line_no, "docno")
        relevance = _integer(parts[3], name, line_no, "rel", RELEVANCE_MIN, RELEVANCE_MAX)
        yield QrelsLine(line_no, query_id, docno, relevance)


def _number(kind: type[int] | type[float], text: str, file: str, line: int, field: str) -> Any:
    """``kind(text)``; a float must be finite (NaN, inf and 1e999 are refused)."""
    shown = text if len(text) <= 40 else text[:40] + "…"
    try:
        value = kind(text)
    except ValueError:
        raise ImportFormatError(file, line, field, f"expected {kind.__name__}, got {shown!r}") from None
    if kind is float and not math.isfinite(value):
        raise ImportFormatError(file, line, field, f"expected a finite number, got {shown!r}")
    return value


def _integer(text: str, file: str, line: int, field: str, low: int, high: int) -> int:
    value: int = _number(int, text, file, line, field)
    if not low <= value <= high:
        shown = text if len(text) <= 40 else text[:40] + "…"
        raise ImportFormatError(file, line, field, f"must be between {low} and {high}, got {shown}")
    return value


def _json_document(path: Path) -> tuple[Any, list[str]]:
    lines = [line for _, line in iter_lines(path)]
    text = "".join(lines)
    return load_json(str(path), None, text), text.splitlines()


def key_line(lines: list[str], key: str) -> int | None:
    """The line of a JSON object's key, for error messages about whole-document JSON files."""
    needle = json.dumps(key)
    return next((i for i, line in enumerate(lines, start=1) if needle in line), None)


def read_queries(path: Path) -> list[tuple[int | None, str, str]]:
    """Queries as (line, query id, text) from a JSON object ``{qid: text}``, or TSV ``qid<TAB>text…``."""
    name = str(path)
    if path.suffix.lower() in {".tsv", ".txt", ".qrels"}:
        result: list[tuple[int | None, str, str]] = []
        for line_no, line in iter_lines(path):
            parts = line.rstrip("\n").split("\t") if "\t" in line else line.split(maxsplit=1)
            query_id = check_length(parts[0].strip(), QUERY_ID_MAX, name, line_no, "query_id")
            result.append((line_no, query_id, " ".join(p.strip() for p in parts[1:])))
        return result
    document, lines = _json_document(path)
    if not isinstance(document, dict):
        raise ImportFormatError(name, 1, None, "expected a JSON object {query_id: text}")
    for key, value in document.items():
        if not isinstance(value, str):
            raise ImportFormatError(name, key_line(lines, key), key, f"expected query text, got {type(value).__name__}")
        check_length(key, QUERY_ID_MAX, name, key_line(lines, key), "query_id")
    return [(key_line(lines, k), k, v) for k, v in document.items()]


def read_official(path: Path) -> list[tuple[int | None, str, float]]:
    """An official leaderboard ``{system: rank}``; ranks may be floats (ties as average ranks)."""
    name = str(path)
    document, lines = _json_document(path)
    if not isinstance(document, dict) or not document:
        raise ImportFormatError(name, 1, None, "expected a non-empty JSON object {system: rank}")
    result = []
    for system, rank in document.items():
        if isinstance(rank, bool) or not isinstance(rank, int | float):
            raise ImportFormatError(name, key_line(lines, system), system, f"expected a numeric rank, got {rank!r}")
        check_length(system, SYSTEM_NAME_MAX, name, key_line(lines, system), "system")
        if not -INT32_MAX <= rank <= INT32_MAX:  # also refuses NaN; ±Infinity cannot reach here (load_json)
            raise ImportFormatError(name, key_line(lines, system), system, f"expected a finite rank, got {rank!r}")
        result.append((key_line(lines, system), system, float(rank)))
    return result
