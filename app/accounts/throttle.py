"""Sign-in backoff per user name and per client address, stored in the database.

The counts live in ``login_throttle`` so that every web worker (and a restarted one) sees them.
A name is keyed by a digest of its case-folded form whether or not such a user exists, so a
lock-out says nothing about which names are real. A locked-out attempt is refused before the
password is checked, and is not counted: the lock-out ends on time for the real user.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import and_, delete, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.accounts.names import name_key
from app.config import Settings
from app.errors import TooMany
from app.models import LoginThrottle

# Doubling stops here; the configured maximum caps the delay long before.
_MAX_DOUBLINGS = 30


@dataclass(frozen=True, slots=True)
class Limit:
    key: str
    max_failures: int


def limits_for(name: str, address: str | None, settings: Settings) -> list[Limit]:
    digest = hashlib.sha256(name_key(name).encode("utf-8", "surrogatepass")).hexdigest()
    limits = [Limit(f"user:{digest}", settings.login_max_failures)]
    if address:
        limits.append(Limit(f"addr:{address[:70]}", settings.login_max_failures_per_address))
    return limits


def ensure_not_locked(session: Session, limits: list[Limit], now: datetime) -> None:
    """Raise ``TooMany`` (with the seconds to wait) while any of ``limits`` is locked out."""
    rows = session.scalars(select(LoginThrottle).where(LoginThrottle.key.in_([limit.key for limit in limits])))
    wait = max(((_aware(row.locked_until) - now).total_seconds() for row in rows if row.locked_until), default=0.0)
    if wait > 0:
        raise TooMany(f"too many failed sign-ins; try again in {math.ceil(wait)} seconds", retry_after=wait)


def record_failure(session: Session, limits: list[Limit], now: datetime, settings: Settings) -> None:
    """Count one failed sign-in against each limit; from its max_failures-th on, lock it out,
    for twice as long as the time before (up to ``login_lockout_max_seconds``)."""
    window = timedelta(seconds=settings.login_failure_window_seconds)
    for limit in limits:
        row = _locked_row(session, limit.key, now)
        if now - _aware(row.last_failure_at) > window:
            row.failures = 0
        row.failures += 1
        row.last_failure_at = now
        over = row.failures - limit.max_failures
        if over >= 0:
            delay = settings.login_lockout_seconds * 2 ** min(over, _MAX_DOUBLINGS)
            delay = min(delay, settings.login_lockout_max_seconds)
            row.locked_until = now + timedelta(seconds=delay)
    session.flush()


def record_success(session: Session, limits: list[Limit], now: datetime, settings: Settings) -> None:
    """Forget the user name's failures (not the address's: one's own account must not reset
    the count of an address that guesses at others), and drop long-expired rows."""
    session.execute(delete(LoginThrottle).where(LoginThrottle.key == limits[0].key))
    cutoff = now - timedelta(seconds=settings.login_failure_window_seconds)
    expired = and_(
        LoginThrottle.last_failure_at < cutoff,
        or_(LoginThrottle.locked_until.is_(None), LoginThrottle.locked_until < now),
    )
    session.execute(delete(LoginThrottle).where(expired))


def _locked_row(session: Session, key: str, now: datetime) -> LoginThrottle:
    """The row for ``key``, created if missing and locked against concurrent sign-ins."""
    insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    session.execute(
        insert(LoginThrottle)
        .values(key=key, failures=0, last_failure_at=now, locked_until=None)
        .on_conflict_do_nothing(index_elements=["key"])
    )
    query = select(LoginThrottle).where(LoginThrottle.key == key).with_for_update()
    return session.scalars(query.execution_options(populate_existing=True)).one()


def _aware(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; every stored one is UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
