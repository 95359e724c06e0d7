from __future__ import annotations


class ImportFormatError(ValueError):
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


class CollectionNotFound(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(f"no collection named {name!r}; import one with `rubric import {name} …`")
