"""Request bodies as a hostile client may send them: bounded while they stream, files straight to disk.

Two pieces:

- ``BodyLimit``, a pure ASGI middleware: every request body is counted as it streams in and the
  byte past ``max_upload_mb`` raises a 413 in whatever is reading it; a declared
  ``Content-Length`` over the limit is refused on the first read, before any body byte is taken.
  A response sent before its request body was read in full closes the connection, so the server
  stops reading a body it has already refused (uvicorn would otherwise drain and discard it).
- ``receive_form``: a multipart form parsed from the stream, each file written to its own path
  as it arrives (never held in memory), text fields bounded in number and size.

Routes that take uploads declare no ``Form``/``File`` parameters (FastAPI would read the whole
body before running their dependencies) and call ``receive_form`` only after their role check;
CSRF for multipart requests is checked from the header or the URL (``app.web.deps.csrf_protect``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from fastapi import HTTPException
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.config import get_settings
from app.errors import Invalid

MB = 1024 * 1024
MAX_TEXT_FIELDS = 20
MAX_TEXT_FIELD_BYTES = 64 * 1024
MAX_FILES = 200
MAX_FILENAME_BYTES = 200


def _too_large(limit: int) -> HTTPException:
    # An HTTPException, not TooLarge: FastAPI re-raises it as it is when it comes out of a Form
    # route's body parsing (any other exception there becomes a generic 400).
    return HTTPException(
        status_code=413,
        detail=f"the upload is larger than {limit // MB} MB, the limit (RUBRIC_MAX_UPLOAD_MB); nothing was stored",
    )


class BodyLimit:
    """Counts each request body as it streams and refuses it past ``max_upload_mb`` (see module docs)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        guard = _BodyGuard(scope, receive, send, get_settings().max_upload_mb * MB)
        await self.app(scope, guard.receive, guard.send)


class _BodyGuard:
    def __init__(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        headers = dict(scope.get("headers") or [])
        self._declared = _int_or_none(headers.get(b"content-length"))
        self._has_body = bool(self._declared) or b"transfer-encoding" in headers
        self._receive = receive
        self._send = send
        self._limit = limit
        self._received = 0
        self._body_done = not self._has_body

    async def receive(self) -> Message:
        if self._declared is not None and self._declared > self._limit:
            raise _too_large(self._limit)
        message = await self._receive()
        if message["type"] == "http.request":
            self._received += len(message.get("body", b""))
            if self._received > self._limit:
                raise _too_large(self._limit)
            self._body_done = not message.get("more_body", False)
        elif message["type"] == "http.disconnect":
            self._body_done = True
        return message

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start" and not self._body_done:
            # The client is still sending a body nobody will read: close rather than drain it.
            message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
        await self._send(message)


def _int_or_none(value: bytes | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class SavedFile:
    """One uploaded file. ``path`` is ``<directory>/<n>/<base name>``: a fresh folder per file keeps
    the user's base name (readers tell formats apart by suffix) and keeps two ``run.txt`` apart."""

    field: str
    name: str
    path: Path


@dataclass(frozen=True, slots=True)
class ReceivedForm:
    fields: dict[str, str]
    files: list[SavedFile]

    def paths(self, field: str) -> list[Path]:
        return [f.path for f in self.files if f.field == field]

    def in_users_words(self, message: str) -> str:
        """``message`` with each server path replaced by the file's name as the user knows it."""
        shown = _display_names(self.files)
        for saved in sorted(self.files, key=lambda f: len(str(f.path)), reverse=True):
            message = message.replace(str(saved.path), shown[saved.path])
        return message


def _display_names(files: list[SavedFile]) -> dict[Path, str]:
    """The base name, with "(#2)" etc. where several uploaded files share it."""
    totals: dict[str, int] = {}
    for saved in files:
        totals[saved.name] = totals.get(saved.name, 0) + 1
    seen: dict[str, int] = {}
    shown = {}
    for saved in files:
        seen[saved.name] = seen.get(saved.name, 0) + 1
        many = totals[saved.name] > 1
        shown[saved.path] = f"{saved.name} (#{seen[saved.name]})" if many else saved.name
    return shown


async def receive_form(request: Request, directory: Path, file_fields: frozenset[str]) -> ReceivedForm:
    """The request's form: files under ``directory`` (only in ``file_fields``), text fields in memory.

    Call it after the route's role check: this is the first read of the body. A URL-encoded form
    (no files) is accepted too; anything else is a 400.
    """
    content_type, options = parse_options_header(request.headers.get("content-type"))
    if content_type == b"application/x-www-form-urlencoded":
        form = await request.form(max_files=0, max_fields=MAX_TEXT_FIELDS)
        return ReceivedForm({k: v for k, v in form.items() if isinstance(v, str)}, [])
    if content_type != b"multipart/form-data" or b"boundary" not in options:
        raise Invalid("send the files as multipart/form-data, as the import form does")
    sink = _FormSink(directory, file_fields)
    try:
        parser = MultipartParser(options[b"boundary"], sink.callbacks())
        async for chunk in request.stream():
            parser.write(chunk)
    except MultipartParseError as error:
        raise Invalid(f"the upload is not a well-formed multipart form ({error})") from None
    except ClientDisconnect:
        raise Invalid("the upload was interrupted before it ended; nothing was stored") from None
    finally:
        sink.close()
    if not sink.ended:
        raise Invalid("the upload ended before the form did; nothing was stored")
    return ReceivedForm(sink.fields, sink.files)


@dataclass
class _FormSink:
    """python-multipart callbacks: text fields kept (bounded), each file written to its own path."""

    directory: Path
    file_fields: frozenset[str]
    fields: dict[str, str] = field(default_factory=dict)
    files: list[SavedFile] = field(default_factory=list)
    ended: bool = False
    _header_name: bytearray = field(default_factory=bytearray)
    _header_value: bytearray = field(default_factory=bytearray)
    _disposition: bytes = b""
    _field: str = ""
    _text: bytearray | None = None
    _handle: BinaryIO | None = None

    def callbacks(self) -> Any:
        return {
            "on_part_begin": self.on_part_begin,
            "on_header_field": self.on_header_field,
            "on_header_value": self.on_header_value,
            "on_header_end": self.on_header_end,
            "on_headers_finished": self.on_headers_finished,
            "on_part_data": self.on_part_data,
            "on_part_end": self.on_part_end,
            "on_end": self.on_end,
        }

    def on_part_begin(self) -> None:
        self._disposition, self._text, self._handle = b"", None, None

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def on_header_end(self) -> None:
        if bytes(self._header_name).lower() == b"content-disposition":
            self._disposition = bytes(self._header_value)
        self._header_name.clear()
        self._header_value.clear()

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self._disposition)
        if b"name" not in options:
            raise Invalid("a part of the upload has no field name")
        self._field = options[b"name"].decode("utf-8", "replace")
        if b"filename" in options:
            self._open_file(options[b"filename"].decode("utf-8", "replace"))
        elif len(self.fields) >= MAX_TEXT_FIELDS:
            raise Invalid(f"the form has more than {MAX_TEXT_FIELDS} text fields")
        else:
            self._text = bytearray()

    def _open_file(self, raw_name: str) -> None:
        if not raw_name:
            return  # a file input left empty: browsers still send the part, with no name and no data
        if self._field not in self.file_fields:
            raise Invalid(f"unexpected file field {self._field[:40]!r}; expected one of {sorted(self.file_fields)}")
        if len(self.files) >= MAX_FILES:
            raise Invalid(f"more than {MAX_FILES} files in one upload")
        name = _base_name(raw_name)
        folder = self.directory / str(len(self.files) + 1)
        folder.mkdir()
        path = folder / name
        self._handle = path.open("xb")
        self.files.append(SavedFile(self._field, name, path))

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._handle is not None:
            self._handle.write(data[start:end])
        elif self._text is not None:
            self._text += data[start:end]
            if len(self._text) > MAX_TEXT_FIELD_BYTES:
                raise Invalid(f"the field {self._field[:40]!r} is longer than {MAX_TEXT_FIELD_BYTES // 1024} KB")

    def on_part_end(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        elif self._text is not None:
            self.fields[self._field] = self._text.decode("utf-8", "replace")
            self._text = None

    def on_end(self) -> None:
        self.ended = True

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _base_name(raw: str) -> str:
    """The file's own name: no folders (some browsers send a Windows path), no control characters."""
    name = "".join(ch for ch in raw.replace("\\", "/").rsplit("/", 1)[-1] if ch.isprintable()).strip()
    if name in {"", ".", ".."}:
        name = "upload"
    if len(name.encode()) > MAX_FILENAME_BYTES:
        raise Invalid(f"the file name {name[:40]!r}… is longer than {MAX_FILENAME_BYTES} bytes")
    return name
