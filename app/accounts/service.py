"""Accounts: argon2-hashed passwords and three roles, each including the ones below it."""

from __future__ import annotations

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerifyMismatchError
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import ROLES, User

_hasher = PasswordHasher()


def role_rank(role: str) -> int:
    return ROLES.index(role)


def has_role(user_role: str, needed: str) -> bool:
    """viewer < judge < organizer: an organizer may do what a judge may, and so on."""
    return role_rank(user_role) >= role_rank(needed)


def create_user(session: Session, name: str, role: str, password: str) -> User:
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    if len(password) < 8:
        raise ValueError("a password needs at least 8 characters")
    if session.scalar(select(User).where(User.name == name)) is not None:
        raise ValueError(f"user {name!r} exists already")
    user = User(name=name, role=role, password_hash=_hasher.hash(password))
    session.add(user)
    session.flush()
    return user


def authenticate(session: Session, name: str, password: str) -> User | None:
    user = session.scalar(select(User).where(User.name == name))
    if user is None:
        _hasher.hash(password)  # same work either way: no timing oracle for user names
        return None
    try:
        _hasher.verify(user.password_hash, password)
    except (VerifyMismatchError, InvalidHashError):
        return None
    return user
