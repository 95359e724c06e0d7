"""The session-signing secret: configured, or generated once and kept in a 0600 file.

A key that changed on every start would sign everyone out on a restart and make each web
worker refuse the others' cookies; a key derived from something guessable (a path) lets anyone
forge cookies. So: ``RUBRIC_SECRET_KEY`` when set, else the contents of ``secret_file``, which
the first process to start creates with 32 random bytes. Every worker of one deployment reads
the same file (or is given the same key).
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
from pathlib import Path

from sqlalchemy.engine import make_url

from app.config import Settings

log = logging.getLogger(__name__)


def session_secret(settings: Settings) -> str:
    if settings.secret_key:
        return settings.secret_key
    return read_or_create_secret(secret_path(settings))


def secret_path(settings: Settings) -> Path:
    """``secret_file``; else ``<database>.secret`` beside a SQLite file; else the user's config dir."""
    if settings.secret_file is not None:
        return settings.secret_file
    database = _sqlite_file(settings.database_url)
    if database is not None:
        return database.with_name(database.name + ".secret")
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return config_home / "rubric-workbench" / "secret"


def read_or_create_secret(path: Path) -> str:
    """The secret in ``path``, creating the file first (mode 0600) if there is none.

    Creation is atomic and never overwrites: the secret is written to a private temporary file
    and hard-linked into place, so a process racing this one either wins or reads the winner's
    complete file, and no reader ever sees a half-written secret.
    """
    existing = _read(path)
    if existing is not None:
        return existing
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as handle:
            handle.write(secrets.token_hex(32) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)
            log.info("created the session secret %s", path)
        except FileExistsError:
            pass  # another process made it first: use theirs
    finally:
        temporary.unlink(missing_ok=True)
    secret = _read(path)
    if secret is None:  # pragma: no cover - deleted between the link and the read
        raise RuntimeError(f"the session secret {path} vanished while it was created")
    return secret


def _read(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    if len(text) < 32:
        raise RuntimeError(f"the session secret {path} is shorter than 32 characters; delete it to get a new one")
    if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("the session secret %s is readable by other users; chmod 600 it", path)
    return text


def _sqlite_file(database_url: str) -> Path | None:
    url = make_url(database_url)
    if not url.drivername.startswith("sqlite") or not url.database or url.database == ":memory:":
        return None
    if url.database.startswith("file:"):
        return None
    return Path(url.database).resolve()
