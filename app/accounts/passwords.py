"""The password policy: long enough, not common, and not derived from the user's name."""

from __future__ import annotations

import string
from functools import lru_cache
from pathlib import Path

from app.errors import Invalid

MIN_PASSWORD_LENGTH = 10
# Bounds the hashing work a hostile form can ask for; pass phrases fit easily.
MAX_PASSWORD_LENGTH = 1024
COMMON_PASSWORDS = Path(__file__).with_name("common_passwords.txt")
# Stripped from both ends before the common-list check, so "Password123!" counts as "password".
_DECORATION = string.digits + string.punctuation + string.whitespace


@lru_cache(maxsize=1)
def common_passwords() -> frozenset[str]:
    lines = COMMON_PASSWORDS.read_text(encoding="utf-8").splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def check_password(password: str, name: str) -> None:
    """Raise ``Invalid`` naming the first rule that ``password`` breaks for the user ``name``."""
    if len(password) < MIN_PASSWORD_LENGTH:
        raise Invalid(f"a password needs at least {MIN_PASSWORD_LENGTH} characters")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise Invalid(f"a password has at most {MAX_PASSWORD_LENGTH} characters")
    if len(set(password)) == 1:
        raise Invalid("a password must not repeat one character")
    if _derived_from_name(password.casefold(), name.strip().casefold()):
        raise Invalid("a password must not contain the user name")
    if _is_common(password.casefold()):
        raise Invalid("this password is one of the most common ones; choose another")


def _derived_from_name(password: str, name: str) -> bool:
    if not name:
        return False
    if password in (name, name[::-1]):
        return True
    # Very short names would forbid ordinary words ("al" in "fallback"); they only count whole.
    return len(name) >= 3 and (name in password or name[::-1] in password)


def _is_common(password: str) -> bool:
    common = common_passwords()
    core = password.strip(_DECORATION)
    return password in common or core in common
