"""User names: 1-64 characters of letters, digits and ``. _ - @``, unique without regard to case.

The safe set keeps names printable everywhere they appear (pages, logs, CSV exports, audit
columns such as ``GradeOverride.judge``) and rules out look-alike and control characters.
"""

from __future__ import annotations

import re

from app.errors import Invalid

MAX_NAME_LENGTH = 64
_NAME = re.compile(r"[A-Za-z0-9._@-]{1,64}")


def valid_name(raw: str) -> str:
    """The name as it is stored (surrounding white space trimmed), or ``Invalid`` saying why."""
    name = raw.strip()
    if not name:
        raise Invalid("a user name must not be blank")
    if len(name) > MAX_NAME_LENGTH:
        raise Invalid(f"a user name has at most {MAX_NAME_LENGTH} characters")
    if not _NAME.fullmatch(name):
        raise Invalid("a user name may only hold letters a-z and A-Z, digits, and . _ - @")
    return name


def name_key(name: str) -> str:
    """The unique, case-insensitive form of a name ("Alice" and "alice" are one user)."""
    return name.strip().casefold()
