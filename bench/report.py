"""Shared by the benchmarks: rewrite one ``## section`` of docs/benchmarks.md, keep the others."""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
HEADER = "# Benchmarks\n\nEach section is rewritten by its benchmark script.\n\n"


def machine() -> str:
    return f"{platform.node()} ({platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()})"


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def write_section(title: str, body: str) -> None:
    """Replace the section whose heading is ``## {title}`` (or append it)."""
    marker = f"## {title}"
    section = f"{marker}\n\n{body.strip()}\n"
    BENCHMARKS.parent.mkdir(exist_ok=True)
    existing = BENCHMARKS.read_text() if BENCHMARKS.exists() else HEADER
    if marker in existing:
        head, _, rest = existing.partition(marker)
        tail = rest[rest.find("\n## ") + 1 :] if "\n## " in rest else ""
        existing = head + section + ("\n" + tail if tail else "")
    else:
        existing = existing.rstrip("\n") + "\n\n" + section
    BENCHMARKS.write_text(existing)
    print(section)
