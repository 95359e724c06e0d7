"""The one place where errors become HTTP responses.

A ``DomainError`` is the user's to fix: its ``status`` and message, as a page or (for htmx and
``/api/``) a fragment. ``HTTPException`` keeps its status. A locked or unreachable database is a
503 the browser may retry. Anything else is a bug, not a user error: it propagates to Starlette's
``ServerErrorMiddleware``, which answers with ``server_error`` below and then re-raises, so the
server logs the traceback while the user sees a generic 500 with the security headers.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import HTTPException, RequestValidationError
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from markupsafe import escape
from sqlalchemy.exc import OperationalError

from app.db import is_busy
from app.errors import DomainError, TooMany
from app.web.deps import LoginRequired, is_htmx, render
from app.web.security import add_security_headers

log = logging.getLogger(__name__)
SERVER_ERROR = "internal error: the server failed on this request and logged it; try again or tell an organizer"


def _wants_fragment(request: Request) -> bool:
    return is_htmx(request) or request.url.path.startswith("/api/")


def error_response(request: Request, status: int, detail: str, headers: dict[str, str] | None = None) -> Response:
    if _wants_fragment(request):
        return HTMLResponse(f'<div class="error" role="alert">{escape(detail)}</div>', status, headers=headers)
    response = render(request, "error.html", {"status": status, "detail": detail}, status=status)
    response.headers.update(headers or {})
    return response


def server_error(request: Request, _: Exception) -> Response:
    """The 500 of an unhandled exception: a fixed message (no exception text, no traceback).

    ``ServerErrorMiddleware`` sends it outside ``SecurityHeaders``, so the headers are added here.
    Rendering the error page needs the session and the router, which the failure may predate:
    then a bare page is sent, since a failing handler would leave the browser a headerless 500.
    """
    try:
        response = error_response(request, 500, SERVER_ERROR)
    except Exception:  # noqa: BLE001  the last resort must answer whatever broke
        log.exception("rendering the error page failed")
        response = PlainTextResponse(SERVER_ERROR, 500)
    add_security_headers(response.headers)
    return response


def _validation_message(error: RequestValidationError) -> str:
    """Name each bad parameter and what it must be, in one line ("query min_judgment: ...")."""
    parts = []
    for problem in error.errors()[:5]:
        location = " ".join(str(p) for p in problem.get("loc", ()) if p != "body")
        parts.append(f"{location}: {problem.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def install(app: FastAPI) -> None:
    app.add_exception_handler(Exception, server_error)  # Starlette hands it to ServerErrorMiddleware

    @app.exception_handler(LoginRequired)
    def to_login(request: Request, _: LoginRequired) -> Response:
        if is_htmx(request):
            return Response(status_code=401, headers={"HX-Redirect": str(request.url_for("login_page"))})
        target = request.url_for("login_page").include_query_params(next=request.url.path)
        return RedirectResponse(str(target), status_code=303)

    @app.exception_handler(DomainError)
    def domain_error(request: Request, error: DomainError) -> Response:
        headers = None
        if isinstance(error, TooMany) and error.retry_after is not None:
            headers = {"Retry-After": str(max(1, round(error.retry_after)))}
        return error_response(request, error.status, str(error), headers)

    @app.exception_handler(HTTPException)
    def http_error(request: Request, error: HTTPException) -> Response:
        return error_response(request, error.status_code, str(error.detail), dict(error.headers or {}))

    @app.exception_handler(RequestValidationError)
    def validation_error(request: Request, error: RequestValidationError) -> Response:
        return error_response(request, 422, _validation_message(error))

    @app.exception_handler(OperationalError)
    def database_busy(request: Request, error: OperationalError) -> Response:
        # Only a lock or a lost connection is the database's state; any other OperationalError is a bug.
        if is_busy(error):
            return error_response(request, 503, "the database is busy; try again in a moment", {"Retry-After": "2"})
        raise error
