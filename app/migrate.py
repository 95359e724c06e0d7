"""Run the Alembic migrations programmatically (``rubric db upgrade`` and the tests).

Importing Alembic costs about 0.2 s, more than ``rubric db upgrade`` has on a database that is already
up to date (issue 16: CLI start under 0.5 s). :func:`upgrade` therefore first reads the database's
revision with one query and the head's from the migration files' ``revision = '…'`` lines, and hands
over to Alembic only when they differ or when either cannot be read plainly (no ``alembic_version``
table yet, a merge or a second branch, a line in another form): Alembic stays the one judge of
anything but "already at the one head". :func:`is_behind` is the same reading for a command that
reads through a plain connection (``rubric collections``) and must still refuse an older schema.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy import Connection

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
# A module-level ``revision: str = '0009'`` or ``down_revision: str | None = None`` line, as Alembic's
# template writes them; the value is read with ``ast.literal_eval``.
_REVISION_LINE = re.compile(r"^(revision|down_revision)\b[^=\n]*=(.*)$", re.MULTILINE)


def alembic_config(database_url: str) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    config.set_main_option("file_template", "%%(year)d-%%(month).2d-%%(day).2d-%%(rev)s_%%(slug)s")
    return config


def _revision_lines(source: str) -> tuple[str, str | None] | None:
    """(revision, down_revision) of one migration file, or None when they are not one plain line each."""
    found: dict[str, object] = {}
    for match in _REVISION_LINE.finditer(source):
        try:
            value = ast.literal_eval(match.group(2).strip())
        except (ValueError, SyntaxError):
            return None
        if match.group(1) in found:
            return None
        found[match.group(1)] = value
    revision, down = found.get("revision"), found.get("down_revision", ...)
    if not isinstance(revision, str) or not (down is None or isinstance(down, str)):
        return None  # a merge revision (a tuple of parents) or no plain revision id: Alembic decides
    return revision, down


def _revision_graph(versions: Path | None = None) -> tuple[frozenset[str], str] | None:
    """(every revision, the one head) of ``migrations/versions``, the head being the revision no other
    file revises; None when the files do not show exactly one head in the plain form."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (versions or MIGRATIONS_DIR / "versions").glob("*.py"):
        lines = _revision_lines(path.read_text(encoding="utf-8"))
        if lines is None:
            return None
        revisions.add(lines[0])
        if lines[1] is not None:
            parents.add(lines[1])
    heads = revisions - parents
    return (frozenset(revisions), heads.pop()) if len(heads) == 1 else None


def head_from_files(versions: Path | None = None) -> str | None:
    """The one head revision of ``migrations/versions``, or None when it cannot be read plainly."""
    graph = _revision_graph(versions)
    return graph[1] if graph else None


def stamped_revisions(connection: Connection) -> list[str] | None:
    """The revisions in the database's ``alembic_version`` (one, unless branched); None when it has no
    such table (never upgraded). Any other error (an unreachable server) raises as Alembic's would.
    On PostgreSQL the connection's transaction is left aborted after None: use it for nothing more."""
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError, ProgrammingError

    from app.db import is_unmigrated

    try:
        return [str(v) for v in connection.execute(text("SELECT version_num FROM alembic_version")).scalars()]
    except (OperationalError, ProgrammingError) as error:
        if not is_unmigrated(error):
            raise
        return None


def is_behind(connection: Connection) -> bool:
    """Whether the database is known to be at an older schema than the code's: never upgraded, or
    stamped with a revision before the head. A revision the files do not know (a newer code's) is not
    known to be older, and neither is anything when the head cannot be read plainly."""
    stamped = stamped_revisions(connection)
    if not stamped:
        return True
    graph = _revision_graph()
    return graph is not None and len(stamped) == 1 and stamped[0] in graph[0] and stamped[0] != graph[1]


def is_at_head(database_url: str) -> bool:
    """Whether the database is stamped with the files' one head (False when either cannot be read plainly)."""
    from app.db import make_engine

    head = head_from_files()
    if head is None:
        return False
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            return stamped_revisions(connection) == [head]
    finally:
        engine.dispose()


def upgrade(database_url: str, revision: str = "head") -> None:
    if revision == "head" and is_at_head(database_url):
        return  # what Alembic would do here, without its import
    from alembic import command

    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    from alembic import command

    command.downgrade(alembic_config(database_url), revision)
