"""Request dependencies: database session, the signed-in user, role checks and CSRF."""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import Depends, HTTPException, Request, Response
from jinja2_fragments.fastapi import Jinja2Blocks
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.accounts.service import has_role
from app.db import session_factory
from app.models import User

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


def _unit_of_work() -> Iterator[Session]:
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
    """Every unsafe request carries the session's token: htmx in a header, forms in a field."""
    if request.method in SAFE_METHODS:
        return
    sent = request.headers.get("x-csrf-token")
    if sent is None and request.headers.get("content-type", "").startswith(
        ("application/x-www-form-urlencoded", "multipart/form-data")
    ):
        sent = str((await request.form()).get("csrf_token") or "")
    expected = request.session.get("csrf")
    if not expected or not sent or not hmac.compare_digest(str(sent), str(expected)):
        raise HTTPException(status_code=403, detail="CSRF token missing or wrong; reload the page and try again")


def optional_user(request: Request, session: Session = db) -> CurrentUser | None:
    name = request.session.get("user")
    if not name:
        return None
    user = session.scalar(select(User).where(User.name == name))
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
