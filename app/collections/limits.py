"""Bounds on what one imported file may cost the server once it is opened."""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import IO

from app.config import get_settings
from app.errors import TooLarge

MB = 1024 * 1024


class _InflateLimit(io.RawIOBase):
    """Reads a decompressing stream and refuses the byte past ``limit``: a small bomb never inflates."""

    def __init__(self, inflating: io.BufferedIOBase, limit: int, file: str) -> None:
        super().__init__()
        self._inflating = inflating
        self._limit = limit
        self._file = file
        self._inflated = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        # Ask for at most one byte past the limit, so the bound holds whatever the buffer size.
        wanted = min(len(buffer), self._limit - self._inflated + 1)
        data = self._inflating.read(wanted)
        self._inflated += len(data)
        if self._inflated > self._limit:
            raise TooLarge(
                f"{self._file}: decompresses to more than {self._limit // MB} MB, the limit for one file "
                "(RUBRIC_MAX_DECOMPRESSED_MB)"
            )
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._inflating.close()
        super().close()


def open_gzip(path: Path, mode: str = "rt", encoding: str = "utf-8") -> IO[str]:
    """A gzip file as text that raises TooLarge (naming ``path``) once it inflates past ``max_decompressed_mb``."""
    if mode != "rt":
        raise ValueError(f"open_gzip reads text only, not mode {mode!r}")
    limit = get_settings().max_decompressed_mb * MB
    bounded = _InflateLimit(gzip.open(path, "rb"), limit, str(path))  # noqa: SIM115  closed with the text stream
    return io.TextIOWrapper(io.BufferedReader(bounded), encoding=encoding)
