"""The names a new collection may have: safe in a URL path segment, a file name and a shell.

Rule (documented in the README): 1 to 100 characters from ASCII letters, digits, ``.``, ``_``
and ``-``, starting with a letter or a digit (so no name is ``.`` or ``..``, which browsers
resolve away). Checked when a collection is created or renamed, by the CLI and the web import
alike. Collections stored before the rule keep working in the CLI; the web lists them without a
link (a ``/`` cannot be a path segment of ``/c/{name}``) and shows ``rename_command``.
"""

from __future__ import annotations

import re
import shlex

from app.errors import Invalid

COLLECTION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
RULE = "1 to 100 characters: letters, digits, '.', '_' and '-', starting with a letter or digit"


def follows_rule(name: str) -> bool:
    """Whether ``name`` is one a new collection may have (so it is safe in a URL path segment)."""
    return COLLECTION_NAME.fullmatch(name) is not None


def checked_collection_name(name: str) -> str:
    """``name`` if a new collection may have it, else ``Invalid`` naming the rule."""
    if not follows_rule(name):
        raise Invalid(f"collection name {name!r} is not allowed: use {RULE}")
    return name


def rename_command(name: str) -> str:
    """The shell command that gives the collection ``name`` a name that follows the rule."""
    return f"rubric collections rename {shlex.quote(name)} NEW-NAME"
