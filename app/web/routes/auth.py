"""Sign in, sign out, and user management (organizers)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.accounts.service import authenticate, create_user
from app.models import ROLES, User
from app.web.deps import CurrentUser, db, optional_user, render, require

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
    user = authenticate(session, name, password)
    if user is None:
        return render(request, "login.html", {"next": _local(next), "error": "wrong name or password"}, status=401)
    request.session.clear()  # a new session id on sign-in: no fixation
    request.session["user"] = user.name
    return RedirectResponse(_local(next), status_code=303)


@router.post("/logout")
def logout(request: Request) -> Response:
    request.session.clear()
    return RedirectResponse("/login", status_code=303)


@router.get("/users")
def users_page(
    request: Request, user: CurrentUser = Depends(require("organizer")), session: Session = db
) -> Response:
    return _users_page(request, session, user)


@router.post("/users")
def add_user(
    request: Request,
    name: str = Form(...),
    role: str = Form(...),
    password: str = Form(...),
    user: CurrentUser = Depends(require("organizer")),
    session: Session = db,
) -> Response:
    try:
        create_user(session, name.strip(), role, password)
        session.commit()
    except ValueError as error:
        session.rollback()
        return _users_page(request, session, user, error=str(error))
    return RedirectResponse("/users", status_code=303)


def _users_page(request: Request, session: Session, user: CurrentUser, error: str | None = None) -> Response:
    rows = [
        {"name": u.name, "role": u.role, "created": u.created_at.strftime("%Y-%m-%d")}
        for u in session.scalars(select(User).order_by(User.name))
    ]
    context = {"user": user, "users": rows, "roles": ROLES, "error": error}
    return render(request, "users.html", context, status=400 if error else 200)


def _local(target: str) -> str:
    """Only same-site redirects after sign-in."""
    return target if target.startswith("/") and not target.startswith("//") else "/"
