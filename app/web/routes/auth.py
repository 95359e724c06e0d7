"""Sign in, sign out, password change, and user management (organizers).

Sessions are server-side (``app.accounts.sessions``): the signed cookie only carries a random
token, so signing out or changing a password ends sessions for every copy of the cookie.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.accounts.service import authenticate, create_user, set_password
from app.accounts.sessions import end_session, open_session
from app.accounts.throttle import ensure_not_locked, limits_for, record_failure, record_success
from app.config import get_settings
from app.errors import Conflict, Invalid
from app.models import ROLES, User
from app.models.base import utcnow
from app.web.deps import SESSION_KEY, CurrentUser, db, optional_user, render, require

router = APIRouter()


@router.get("/login")
def login_page(request: Request, next: str = "/", user: CurrentUser | None = Depends(optional_user)) -> Response:
    return render(request, "login.html", {"next": _local(next), "error": None, "user": user})


@router.post("/login")
def login(
    request: Request,
    name: str = Form(...),
    password: str = Form(...),
    next: str = Form("/"),
    session: Session = db,
) -> Response:
    """Refused with 429 while the name or the address is locked out (before the password is
    checked); a wrong password is counted, and committed with the 401 page."""
    settings = get_settings()
    now = utcnow()
    limits = limits_for(name, request.client.host if request.client else None, settings)
    ensure_not_locked(session, limits, now)
    user = authenticate(session, name, password)
    if user is None:
        record_failure(session, limits, now, settings)
        return render(request, "login.html", {"next": _local(next), "error": "wrong name or password"}, status=401)
    record_success(session, limits, now, settings)
    end_session(session, request.session.get(SESSION_KEY))
    request.session.clear()  # a new session id on sign-in: no fixation
    request.session[SESSION_KEY] = open_session(session, user, settings.session_max_age_seconds)
    return RedirectResponse(_local(next), status_code=303)


@router.post("/logout")
def logout(request: Request, session: Session = db) -> Response:
    end_session(session, request.session.get(SESSION_KEY))
    request.session.clear()
    return RedirectResponse("/login", status_code=303)


@router.get("/account")
def account_page(request: Request, user: CurrentUser = Depends(require("viewer"))) -> Response:
    return _account_page(request, user)


@router.post("/account/password")
def account_password(
    request: Request,
    current_password: str = Form(...),
    new_password: str = Form(...),
    user: CurrentUser = Depends(require("viewer")),
    session: Session = db,
) -> Response:
    """Change one's own password; every other session of the user ends, this one stays.

    The current password is checked under the sign-in throttle, so a borrowed session cannot
    be used to guess it."""
    settings = get_settings()
    now = utcnow()
    limits = limits_for(user.name, request.client.host if request.client else None, settings)
    ensure_not_locked(session, limits, now)
    account = authenticate(session, user.name, current_password)
    if account is None:
        record_failure(session, limits, now, settings)
        return _account_page(request, user, error="the current password is wrong")
    try:
        set_password(session, account, new_password, keep_token=request.session.get(SESSION_KEY))
    except Invalid as error:  # the policy refused it before anything was written
        return _account_page(request, user, error=str(error))
    return _account_page(request, user, done=True)


def _account_page(request: Request, user: CurrentUser, error: str | None = None, done: bool = False) -> Response:
    context = {"user": user, "error": error, "done": done}
    return render(request, "account.html", context, status=400 if error else 200)


@router.get("/users")
def users_page(request: Request, user: CurrentUser = Depends(require("organizer")), session: Session = db) -> Response:
    return _users_page(request, session, user)


@router.post("/users")
def add_user(
    request: Request,
    name: str = Form(""),  # blank reaches the name rules: a 400 that says why, not a 422
    role: str = Form(...),
    password: str = Form(""),
    user: CurrentUser = Depends(require("organizer")),
    session: Session = db,
) -> Response:
    try:
        create_user(session, name, role, password)
    except (Invalid, Conflict) as error:  # refused before anything was written: show it on the form
        return _users_page(request, session, user, error=str(error), status=error.status)
    return RedirectResponse("/users", status_code=303)


def _users_page(
    request: Request, session: Session, user: CurrentUser, error: str | None = None, status: int = 200
) -> Response:
    rows = [
        {"name": u.name, "role": u.role, "created": u.created_at.strftime("%Y-%m-%d")}
        for u in session.scalars(select(User).order_by(User.name))
    ]
    context = {"user": user, "users": rows, "roles": ROLES, "error": error}
    return render(request, "users.html", context, status=status)


def _local(target: str) -> str:
    """Only same-site redirects after sign-in."""
    return target if target.startswith("/") and not target.startswith("//") else "/"
