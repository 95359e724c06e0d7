"""Accounts: argon2-hashed passwords and three roles, each including the ones below it.

Every name passes ``names.valid_name`` and every new password ``passwords.check_password``
here, whichever front end (web form, CLI, demo) creates the user.
"""

from __future__ import annotations

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.accounts.names import MAX_NAME_LENGTH, name_key, valid_name
from app.accounts.passwords import MAX_PASSWORD_LENGTH, check_password
from app.accounts.sessions import end_other_sessions
from app.errors import Conflict, Invalid, NotFound
from app.models import ROLES, User
from app.models.base import utcnow

_hasher = PasswordHasher()


def role_rank(role: str) -> int:
    return ROLES.index(role)


def has_role(user_role: str, needed: str) -> bool:
    """viewer < judge < organizer: an organizer may do what a judge may, and so on."""
    return role_rank(user_role) >= role_rank(needed)


def create_user(session: Session, name: str, role: str, password: str) -> User:
    """A new user; ``Conflict`` when the name is taken in any letter case (atomic: two
    concurrent requests for one name create one user)."""
    if role not in ROLES:
        raise Invalid(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    name = valid_name(name)
    check_password(password, name)
    insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    values = {
        "name": name,
        "name_key": name_key(name),
        "role": role,
        "password_hash": _hasher.hash(password),
        "created_at": utcnow(),
    }
    new_id = session.scalar(insert(User).values(**values).on_conflict_do_nothing().returning(User.id))
    if new_id is None:
        raise Conflict(f"user {name!r} exists already")
    user = session.get(User, new_id)
    assert user is not None
    return user


def find_user(session: Session, name: str) -> User | None:
    """The user of ``name`` in any letter case; None for any name that cannot be one."""
    if not name or len(name) > MAX_NAME_LENGTH * 2 or "\x00" in name:  # PostgreSQL refuses NUL in text
        return None
    return session.scalar(select(User).where(User.name_key == name_key(name)))


def user_or_404(session: Session, name: str) -> User:
    user = find_user(session, name)
    if user is None:
        raise NotFound(f"no user {name[:MAX_NAME_LENGTH]!r}")
    return user


def authenticate(session: Session, name: str, password: str) -> User | None:
    user = find_user(session, name)
    if user is None or len(password) > MAX_PASSWORD_LENGTH:
        _hasher.hash(password[:MAX_PASSWORD_LENGTH])  # same work either way: no timing oracle for names
        return None
    try:
        _hasher.verify(user.password_hash, password)
    except (VerificationError, InvalidHashError):
        return None
    return user


def set_password(session: Session, user: User, new: str, keep_token: object = None) -> None:
    """Replace the password (the caller has checked the current one, or is an organizer) and
    end every session of the user but ``keep_token``'s: a stolen cookie dies with the old password."""
    check_password(new, user.name)
    user.password_hash = _hasher.hash(new)
    end_other_sessions(session, user, keep_token)
    session.flush()


# ---- organizers managing accounts ---------------------------------------------------------------


def _active_organizers(session: Session) -> int:
    return int(
        session.scalar(
            select(func.count()).select_from(User).where(User.role == "organizer", User.disabled_at.is_(None))
        )
        or 0
    )


def _keep_an_organizer(session: Session, user: User, what: str) -> None:
    """Refuse to demote or disable the last enabled organizer: nobody could manage the accounts again."""
    if user.role == "organizer" and user.disabled_at is None and _active_organizers(session) <= 1:
        raise Conflict(f"{user.name} is the last organizer and cannot be {what}; make another user an organizer first")


def set_role(session: Session, user: User, role: str) -> None:
    """A new role, effective at the user's next request (roles are read per request)."""
    if role not in ROLES:
        raise Invalid(f"role must be one of {', '.join(ROLES)}, not {role[:20]!r}")
    if role != "organizer":
        _keep_an_organizer(session, user, "demoted")
    user.role = role
    session.flush()


def reset_password(session: Session, user: User, new: str) -> None:
    """An organizer sets a new password: the policy applies, and every session of the user ends."""
    set_password(session, user, new)


def disable_user(session: Session, user: User) -> None:
    """The account can no longer sign in, and its sessions end now (every copy of every cookie)."""
    if user.disabled_at is not None:
        return
    _keep_an_organizer(session, user, "disabled")
    user.disabled_at = utcnow()
    end_other_sessions(session, user)
    session.flush()


def enable_user(session: Session, user: User) -> None:
    user.disabled_at = None
    session.flush()
