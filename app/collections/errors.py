"""The import and lookup errors of collections, as domain errors (``app/errors.py``).

An ``ImportFormatError`` is ``Invalid`` (400 on the web, exit 2 on the CLI) and still a
``ValueError``; a ``CollectionNotFound`` is ``NotFound`` (404) and still a ``LookupError``.
"""

from __future__ import annotations

from app.errors import Invalid, NotFound


class ImportFormatError(Invalid):
    """Bad input, located by file, line and field so the user can fix it."""

    def __init__(self, file: str, line: int | None, field: str | None, message: str) -> None:
        self.file = file
        self.line = line
        self.field = field
        self.message = message
        where = file if line is None else f"{file}, line {line}"
        if field:
            where += f", field {field!r}"
        super().__init__(f"{where}: {message}")


class CollectionNotFound(NotFound):
    def __init__(self, name: str) -> None:
        shown = name if len(name) <= 200 else name[:200] + "…"
        super().__init__(f"no collection named {shown!r}; import one with `rubric import {shown} …`")
