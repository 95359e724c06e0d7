"""Request dependencies: database session, the signed-in user, role checks and CSRF."""

from __future__ import annotations

import asyncio
import hmac
import secrets
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import Depends, HTTPException, Request, Response
from jinja2_fragments.fastapi import Jinja2Blocks
from sqlalchemy.orm import Session

from app.accounts.service import has_role
from app.accounts.sessions import user_for_token
from app.db import session_factory

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
TEMPLATES = Jinja2Blocks(directory=str(Path(__file__).resolve().parents[2] / "templates"))


class LoginRequired(Exception):
    pass


@dataclass(frozen=True, slots=True)
class CurrentUser:
    name: str
    role: str

    def can(self, role: str) -> bool:
        return has_role(self.role, role)


# Requests that may hold a database session at once, per process. Each waits for a slot in the event
# loop (holding no thread and no connection), so a burst of requests can never leave every worker
# thread blocked on a pooled connection that another request, itself waiting for a thread, holds.
# The engine's pool (``app.db.POOL_SIZE + POOL_OVERFLOW``) is larger, leaving room for the
# background sweep and the embedded worker's threads.
DB_REQUEST_SLOTS = 20
_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


@asynccontextmanager
async def db_slot() -> AsyncIterator[None]:
    """Wait (asynchronously) for one of the process's request slots, then hold it for the block."""
    loop = asyncio.get_running_loop()
    slots = _slots.get(loop)
    if slots is None:
        slots = _slots[loop] = asyncio.Semaphore(DB_REQUEST_SLOTS)
    async with slots:
        yield


async def _request_slot() -> AsyncIterator[None]:
    async with db_slot():
        yield


def _unit_of_work(_: None = Depends(_request_slot, scope="function")) -> Iterator[Session]:
    """The request's transaction: committed when the route returns, rolled back when it raises.

    Routes and services never commit. Side effects that must follow the commit (enqueuing,
    events) are registered with ``app.db.after_commit``. Function scope: the commit happens
    before the response is sent, so a redirect never races its own data, a failed commit is an
    error response, and a streaming response holds no connection while it streams.
    """
    session = session_factory()()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


# Use as ``session: Session = db`` in a route's signature (one session per request, shared).
db: Any = Depends(_unit_of_work, scope="function")


def csrf_token(request: Request) -> str:
    token = request.session.get("csrf")
    if not token:
        token = request.session["csrf"] = secrets.token_urlsafe(32)
    return str(token)


async def csrf_protect(request: Request) -> None:
    """Every unsafe request carries the session's token: htmx in a header, forms in a field.

    A multipart body (an upload) is never read here: its token comes in the header or in the
    URL's ``csrf_token``, so a forged or anonymous upload is refused before its first byte.
    """
    if request.method in SAFE_METHODS:
        return
    sent = request.headers.get("x-csrf-token")
    content_type = request.headers.get("content-type", "")
    if sent is None and content_type.startswith("multipart/form-data"):
        sent = request.query_params.get("csrf_token")
    elif sent is None and content_type.startswith("application/x-www-form-urlencoded"):
        sent = str((await request.form()).get("csrf_token") or "")
    expected = request.session.get("csrf")
    if not expected or not sent or not hmac.compare_digest(str(sent), str(expected)):
        raise HTTPException(status_code=403, detail="CSRF token missing or wrong; reload the page and try again")


# The cookie's key for the server-side session token (app.accounts.sessions).
SESSION_KEY = "sid"


def optional_user(request: Request, session: Session = db) -> CurrentUser | None:
    """The user of a live server-side session, checked on every request: a cookie whose session
    was ended (sign-out, password change) or never existed (forged) is nobody."""
    user = user_for_token(session, request.session.get(SESSION_KEY))
    return CurrentUser(user.name, user.role) if user else None


def require(role: str) -> Callable[..., CurrentUser]:
    """Dependency: the signed-in user if their role is at least ``role`` (server-side, on every route)."""

    def check(user: CurrentUser | None = Depends(optional_user)) -> CurrentUser:
        if user is None:
            raise LoginRequired()
        if not user.can(role):
            raise HTTPException(status_code=403, detail=f"this needs the {role} role; you are a {user.role}")
        return user

    return check


def render(
    request: Request, name: str, context: dict[str, Any], *, block: str | None = None, status: int = 200
) -> Response:
    """A page, or one named block of it for an htmx request (fragments are blocks of the page template)."""
    base = {"csrf_token": csrf_token(request), "user": context.get("user")}
    kwargs: dict[str, Any] = {"status_code": status}
    if block:
        kwargs["block_name"] = block
    response: Response = TEMPLATES.TemplateResponse(request, name, {**base, **context}, **kwargs)
    return response


def is_htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"
