"""Alembic environment: URL from the settings (or a connection handed in by the caller)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from app.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:
        # Batch mode rebuilds a table (copy, DROP, rename); with foreign keys on, SQLite's DROP
        # deletes the old table's rows first and cascades: every grade of a rebuilt grader table,
        # every pool entry of a rebuilt collection table. Off for the migration (outside a
        # transaction, where the pragma takes effect), on again after.
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
        connection.commit()  # the pragma is a no-op inside a transaction: end the implicit one first
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        render_as_batch=sqlite,
    )
    try:
        with context.begin_transaction():
            context.run_migrations()
    finally:
        if sqlite:
            connection.exec_driver_sql("PRAGMA foreign_keys=ON")
            connection.commit()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    from app.db import make_engine

    url = config.get_main_option("sqlalchemy.url")
    if not url:
        from app.config import get_settings

        url = get_settings().database_url
    engine = make_engine(url)
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()


run_migrations_online()
