"""The names a new collection may have: safe in a URL path segment, a file name and a shell.

Rule (documented in the README): 1 to 100 characters from ASCII letters, digits, ``.``, ``_``
and ``-``, starting with a letter or a digit (so no name is ``.`` or ``..``, which browsers
resolve away). Checked when a collection is created, by the CLI and the web import alike;
collections stored before the rule keep working in the CLI.
"""

from __future__ import annotations

import re

from app.errors import Invalid

COLLECTION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
RULE = "1 to 100 characters: letters, digits, '.', '_' and '-', starting with a letter or digit"


def checked_collection_name(name: str) -> str:
    """``name`` if a new collection may have it, else ``Invalid`` naming the rule."""
    if not COLLECTION_NAME.fullmatch(name):
        raise Invalid(f"collection name {name!r} is not allowed: use {RULE}")
    return name
