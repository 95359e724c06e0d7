"""The domain's errors: what a user got wrong, as opposed to a bug in the workbench.

One small hierarchy, mapped in one place for each front end: ``app/web/errors.py`` turns a
``DomainError`` into its ``status`` (a page, or an htmx fragment), and ``app/cli.py`` prints
``error: <message>`` and exits 2. Anything that is not a ``DomainError`` is a bug and surfaces as
a logged 500 (or a traceback on the CLI), never as a user error.

The builtin bases (``LookupError``, ``ValueError``) keep older ``except`` clauses in library-style
code working; front ends catch ``DomainError`` only.
"""

from __future__ import annotations

from typing import ClassVar


class DomainError(Exception):
    """A refusal the user can act on; ``str(error)`` is the message they see."""

    status: ClassVar[int] = 400


class NotFound(DomainError, LookupError):
    status = 404


class Invalid(DomainError, ValueError):
    """Bad input: a parameter out of bounds, a malformed file, an impossible combination."""

    status = 400


class Conflict(DomainError):
    """The stored state moved on since the user looked (a concurrent edit)."""

    status = 409


class TooMany(DomainError):
    """A per-user or per-address limit: too many open streams, too many sign-in attempts."""

    status = 429

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class TooLarge(DomainError):
    status = 413


class Unavailable(DomainError):
    """A dependency (database lock, broker) is busy or down; the request may be retried as it is."""

    status = 503
