"""Response headers, URL building for stored names, and safe download file names.

Three invariants are enforced here, in one place:

- Every HTTP response (pages, fragments, static files, errors, streams) carries the security
  headers below; a route may set its own value first, which is kept.
- A query id may hold any character (TREC CAR ids contain ``/`` and ``%20``): path parameters
  declared ``{query_id:any}`` are percent-encoded by ``url_for`` and read back verbatim.
- Links in templates are same-origin paths (``url_for`` without scheme and host), so a wrong
  ``Host`` header or a TLS proxy never leaks into a link.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from jinja2 import pass_context
from starlette.convertors import Convertor, register_url_convertor
from starlette.datastructures import URL, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.web.deps import TEMPLATES

# The pages load only same-origin scripts and styles (htmx and its SSE extension are vendored
# under /static/vendor); htmx's own indicator <style> is switched off in base.html, and the
# favicon is an empty data: URL. No inline script, no style attribute, no eval.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "font-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def add_security_headers(headers: MutableHeaders) -> None:
    """Set each security header the response has not set itself."""
    for name, value in SECURITY_HEADERS.items():
        headers.setdefault(name, value)


class SecurityHeaders:
    """Pure ASGI middleware (no body buffering, so Server-Sent Events keep streaming).

    Starlette sends the 500 of an unhandled exception from ``ServerErrorMiddleware``, which sits
    outside every user middleware; that response gets the headers from ``app/web/errors.py``.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                add_security_headers(MutableHeaders(scope=message))
            await send(message)

        await self.app(scope, receive, send_with_headers)


# ---- any text as a path segment ---------------------------------------------------------------

_DOTS = re.compile(r"~*\.{0,2}")


class AnyText(Convertor[str]):
    """``{param:any}``: any string, including ``/``, ``?``, ``%``, newlines and the empty string.

    Starlette matches routes on the percent-decoded path, so ``to_string`` encodes every reserved
    character (``/`` too) and ``convert`` gets the original back. Browsers resolve the segments
    ``.`` and ``..`` (also when written ``%2e``), and an empty segment is easily lost, so values of
    the form ``~*.{0,2}`` get one more leading ``~`` on the way out and lose it on the way in: a
    bijection on all strings. Usable in the middle of a path too (the regex backtracks), as in
    ``/c/{name}/rubric/{query_id:any}/save``.
    """

    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value[1:] if value.startswith("~") and _DOTS.fullmatch(value) else value

    def to_string(self, value: str) -> str:
        text = str(value)
        if _DOTS.fullmatch(text):
            text = "~" + text
        return quote(text, safe="")


register_url_convertor("any", AnyText())


def path_for(request: Request, name: str, /, **path_params: Any) -> URL:
    """``request.url_for`` as a same-origin path (for links and redirects); ``.include_query_params`` adds a query."""
    return request.url_for(name, **path_params).replace(scheme="", netloc="")


@pass_context
def _template_path_for(context: Any, name: str, /, **path_params: Any) -> URL:
    return path_for(context["request"], name, **path_params)


# ---- downloads --------------------------------------------------------------------------------

_UNSAFE_IN_FILENAME = re.compile(r"[^A-Za-z0-9._-]")


def content_disposition(filename: str, disposition: str = "attachment") -> str:
    """An RFC 6266 header value: an ASCII ``filename`` fallback and the exact ``filename*``.

    The fallback keeps letters, digits and ``._-`` (anything else, quotes and CR/LF included,
    becomes ``_``), so it can neither end the quoted string nor the header line.
    """
    fallback = _UNSAFE_IN_FILENAME.sub("_", filename).lstrip(".") or "download"
    return f"{disposition}; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


def install(app: FastAPI) -> None:
    """Add the headers to every response and make templates build same-origin links."""
    app.add_middleware(SecurityHeaders)
    TEMPLATES.env.globals["url_for"] = _template_path_for
