"""Sign in, sign out, password change, and user management (organizers).

Sessions are server-side (``app.accounts.sessions``): the signed cookie only carries a random
token, so signing out or changing a password ends sessions for every copy of the cookie.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fastapi import APIRouter, Depends, Form, Request
from fastapi import Path as PathParam
from fastapi.responses import RedirectResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.accounts.names import MAX_NAME_LENGTH
from app.accounts.passwords import MAX_PASSWORD_LENGTH
from app.accounts.service import (
    authenticate,
    create_user,
    disable_user,
    enable_user,
    reset_password,
    set_password,
    set_role,
    user_or_404,
)
from app.accounts.sessions import end_session, open_session
from app.accounts.throttle import ensure_not_locked, limits_for, record_failure, record_success
from app.config import get_settings
from app.errors import Conflict, DomainError, Invalid
from app.models import ROLES, User
from app.models.base import utcnow
from app.web.deps import SESSION_KEY, CurrentUser, db, optional_user, render, require
from app.web.security import path_for

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
    if user.disabled_at is not None:  # only told after the right password: no oracle for who is disabled
        context = {"next": _local(next), "error": "this account is disabled; ask an organizer to enable it"}
        return render(request, "login.html", context, status=403)
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


@router.get("/users", name="users_page")
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


# The user an organizer acts on, named in the path (bounded: a longer name cannot be one).
UserName = PathParam(min_length=1, max_length=MAX_NAME_LENGTH)


@dataclass(frozen=True)
class AccountAction:
    """An organizer's request to act on the user named in the path (``/users/{user_name}/…``)."""

    request: Request
    session: Session
    organizer: CurrentUser
    user_name: str

    def run(self, action: Callable[[Session, User], None], done: str) -> Response:
        """Look the user up and act; a refusal (raised before anything is written) is shown on the
        users page, a success is told once after the redirect."""
        try:
            account = user_or_404(self.session, self.user_name)
            action(self.session, account)
        except DomainError as error:
            return _users_page(self.request, self.session, self.organizer, error=str(error), status=error.status)
        self.request.session["users_notice"] = f"{account.name}: {done}"
        me = account.name == self.organizer.name
        still_manages = not me or (account.role == "organizer" and account.disabled_at is None)
        target = "users_page" if still_manages else "account_page"  # who demoted themselves sees their new role
        return RedirectResponse(str(path_for(self.request, target)), status_code=303)


def account_action(
    request: Request,
    user_name: str = UserName,
    user: CurrentUser = Depends(require("organizer")),
    session: Session = db,
) -> AccountAction:
    return AccountAction(request, session, user, user_name)


@router.post("/users/{user_name}/role", name="set_user_role")
def set_user_role(role: str = Form(..., max_length=20), act: AccountAction = Depends(account_action)) -> Response:
    """A new role, in force at the user's next request; the last organizer cannot be demoted."""
    return act.run(lambda session, account: set_role(session, account, role), "role set")


@router.post("/users/{user_name}/password", name="reset_user_password")
def reset_user_password(
    password: str = Form("", max_length=MAX_PASSWORD_LENGTH + 1),  # one over: the policy says why
    act: AccountAction = Depends(account_action),
) -> Response:
    """An organizer sets a new password (the password rules apply); every session of the user ends."""
    done = "password reset; their sessions ended"
    return act.run(lambda session, account: reset_password(session, account, password), done)


@router.post("/users/{user_name}/disable", name="disable_user")
def disable(act: AccountAction = Depends(account_action)) -> Response:
    """No more sign-ins, and the user's sessions end; the last organizer cannot be disabled."""
    return act.run(disable_user, "disabled; their sessions ended")


@router.post("/users/{user_name}/enable", name="enable_user")
def enable(act: AccountAction = Depends(account_action)) -> Response:
    return act.run(enable_user, "enabled")


def _users_page(
    request: Request,
    session: Session,
    user: CurrentUser,
    error: str | None = None,
    status: int = 200,
) -> Response:
    notice = request.session.pop("users_notice", None)
    users = list(session.scalars(select(User).order_by(User.name)))
    organizers = [u for u in users if u.role == "organizer" and u.disabled_at is None]
    rows = [
        {
            "last_organizer": len(organizers) == 1 and u is organizers[0],
            "name": u.name,
            "role": u.role,
            "created": u.created_at.strftime("%Y-%m-%d"),
            "disabled": u.disabled_at.strftime("%Y-%m-%d") if u.disabled_at else None,
            "me": u.name == user.name,
        }
        for u in users
    ]
    context = {"user": user, "users": rows, "roles": ROLES, "error": error, "notice": notice}
    return render(request, "users.html", context, status=status)


def _local(target: str) -> str:
    """Only same-site redirects after sign-in."""
    return target if target.startswith("/") and not target.startswith("//") else "/"
