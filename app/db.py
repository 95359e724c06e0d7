"""Engine and unit-of-work helpers. The caller of a service owns the transaction.

Side effects that must only happen once data is durable (enqueuing batches, publishing events)
are registered with ``after_commit(session, callback)``: they run after the session's next
successful commit and are dropped by a rollback, so no caller has to remember the order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache, lru_cache
from typing import TYPE_CHECKING

from sqlalchemy import Engine, create_engine, event

# The ORM loads where a session is made, not here: a command that reads through a plain connection
# (``rubric collections``, ``rubric db upgrade`` at head) starts without it (issue 16: CLI start).
if TYPE_CHECKING:
    from sqlalchemy.exc import DBAPIError, OperationalError
    from sqlalchemy.orm import Session, sessionmaker

log = logging.getLogger(__name__)
_HOOKS = "after_commit_hooks"
# How long a SQLite writer waits for another writer's lock before "database is locked" (ms).
SQLITE_BUSY_TIMEOUT_MS = 5000
# Connections kept open, and opened on demand beyond them. Larger than the web's request slots
# (``app.web.deps.DB_REQUEST_SLOTS``) so that background threads always find a connection.
POOL_SIZE = 10
POOL_OVERFLOW = 30


def _sqlite_pragmas(dbapi_connection: object, _record: object) -> None:
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    # WAL lets the web process read while a worker writes; FKs are off by default in SQLite.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.close()


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
            pool_size=POOL_SIZE,
            max_overflow=POOL_OVERFLOW,
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(
        url,
        connect_args=_postgres_connect_args(url),
        pool_pre_ping=True,
        pool_size=POOL_SIZE,
        max_overflow=POOL_OVERFLOW,
    )


# PostgreSQL compiles a statement with LLVM once its estimated cost passes ``jit_above_cost``; the
# workbench's statements are either small or plain scans, and the compile alone took 65 of the
# 99 ms of ``rubric collections`` at 10× DL (issue 16), with no gain on a cold snapshot build.
POSTGRES_OPTIONS = "-c jit=off"


def _postgres_connect_args(url: str) -> dict[str, str]:
    """The server options of every connection: ours first, so that the URL's own ``options`` win."""
    from sqlalchemy.engine import make_url

    given = make_url(url).query.get("options")
    theirs = " ".join(given) if isinstance(given, tuple) else given
    return {"options": f"{POSTGRES_OPTIONS} {theirs}" if theirs else POSTGRES_OPTIONS}


@lru_cache
def engine_for(url: str) -> Engine:
    return make_engine(url)


def get_engine() -> Engine:
    from app.config import get_settings

    return engine_for(get_settings().database_url)


def session_factory(engine: Engine | None = None) -> sessionmaker[Session]:
    from sqlalchemy.orm import sessionmaker

    return sessionmaker(bind=engine or get_engine(), expire_on_commit=False)


@contextmanager
def session_scope(engine: Engine | None = None) -> Iterator[Session]:
    """Open a session, commit on success, roll back on any exception."""
    session = session_factory(engine)()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def is_busy(error: OperationalError) -> bool:
    """A locked SQLite file or an unreachable server: the database's state, not a bug; retrying may work."""
    text = str(error.orig).lower()
    return any(sign in text for sign in ("locked", "busy", "could not connect", "connection", "timeout"))


def is_unmigrated(error: DBAPIError) -> bool:
    """A table or column the code expects is missing: a database never upgraded (or left at an older
    revision), which ``rubric db upgrade`` fixes; SQLite and PostgreSQL word it differently."""
    text = str(error.orig).lower()
    return (
        "no such table" in text
        or "no such column" in text
        or ("does not exist" in text and ("relation" in text or "column" in text))
    )


def after_commit(session: Session, callback: Callable[[], object]) -> None:
    """Run ``callback`` once, after ``session``'s next successful commit (never if it rolls back).

    Callbacks run in registration order, outside the transaction; one that raises is logged and
    the others still run, because the data they follow is already committed.
    """
    _listen_for_commits()
    session.info.setdefault(_HOOKS, []).append(callback)


@cache
def _listen_for_commits() -> None:
    """Hook the ORM's commit and rollback events, once, before the first callback is registered (not at
    import: the ORM is not loaded yet). Were two threads to race here, both listeners would run twice
    per commit, which is harmless: the first pops the callbacks, the second finds none."""
    from sqlalchemy.orm import Session

    event.listen(Session, "after_commit", _run_after_commit)
    event.listen(Session, "after_rollback", _drop_after_rollback)


def _run_after_commit(session: Session) -> None:
    for callback in session.info.pop(_HOOKS, []):
        try:
            callback()
        except Exception:  # noqa: BLE001  the commit stands; the callback's own retry path takes over
            log.exception("after-commit callback %r failed", callback)


def _drop_after_rollback(session: Session) -> None:
    session.info.pop(_HOOKS, None)
