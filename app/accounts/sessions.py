"""Server-side sessions: the cookie carries a random token, the database its SHA-256.

A session is valid while its row exists and has not expired, so signing out (deleting the row)
ends it for every copy of the cookie, and a forged cookie (even one signed with the right key)
opens nothing without a token that is in the table.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.models import AuthSession, User
from app.models.base import utcnow

# A token is 43 URL-safe characters; anything much longer is not ours and is not hashed.
_MAX_TOKEN_LENGTH = 100


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def open_session(session: Session, user: User, max_age_seconds: int) -> str:
    """A new session for ``user``; returns the token for the cookie (only its digest is stored)."""
    now = utcnow()
    session.execute(delete(AuthSession).where(AuthSession.user_id == user.id, AuthSession.expires_at < now))
    token = secrets.token_urlsafe(32)
    expires = now + timedelta(seconds=max_age_seconds)
    session.add(AuthSession(token_hash=_digest(token), user_id=user.id, created_at=now, expires_at=expires))
    session.flush()
    return token


def user_for_token(session: Session, token: object, now: datetime | None = None) -> User | None:
    """The user of a live session, or None for a missing, unknown, ended or expired token, or a disabled user."""
    if not isinstance(token, str) or not token or len(token) > _MAX_TOKEN_LENGTH:
        return None
    query = (
        select(User)
        .join(AuthSession, AuthSession.user_id == User.id)
        .where(AuthSession.token_hash == _digest(token), AuthSession.expires_at > (now or utcnow()))
        .where(User.disabled_at.is_(None))  # a disabled account's cookie opens nothing, whatever it holds
    )
    return session.scalars(query).first()


def end_session(session: Session, token: object) -> None:
    if isinstance(token, str) and token and len(token) <= _MAX_TOKEN_LENGTH:
        session.execute(delete(AuthSession).where(AuthSession.token_hash == _digest(token)))


def end_other_sessions(session: Session, user: User, keep_token: object = None) -> None:
    """End every session of ``user`` except the one holding ``keep_token`` (after a password change)."""
    query = delete(AuthSession).where(AuthSession.user_id == user.id)
    if isinstance(token := keep_token, str) and token and len(token) <= _MAX_TOKEN_LENGTH:
        query = query.where(AuthSession.token_hash != _digest(token))
    session.execute(query)
