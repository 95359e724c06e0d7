"""A throwaway PostgreSQL cluster for the benchmarks (the same recipe as tests/conftest.py ``postgres_server``).

The cluster runs with ``fsync=off`` and ``full_page_writes=off``: a benchmark measures the application, not
the disk's flush latency, so figures taken on it are a lower bound for a durable production server. Every
caller that prints figures should print :data:`DURABILITY_NOTE` with them.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text

DURABILITY_NOTE = "PostgreSQL: throwaway local cluster with fsync=off, full_page_writes=off (no durability cost)"
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries under /usr/lib/postgresql/*/bin."""


def postgres_bin() -> Path | None:
    """The newest installed server's bin directory (Debian layout), or None."""
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), reverse=True)
    return candidates[0].parent if candidates else None


def _as_postgres(args: list[str]) -> list[str]:
    # initdb and postgres refuse to run as root; Debian's package creates the postgres user.
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def local_postgres() -> Iterator[str]:
    """Start a trust-auth cluster on a free loopback port; yield ``postgresql+psycopg://rubric@127.0.0.1:PORT``.

    The cluster is stopped and its directory removed on exit, whatever happens inside the block.
    """
    bindir = postgres_bin()
    if bindir is None:
        raise PostgresUnavailable("no PostgreSQL server binaries found under /usr/lib/postgresql/*/bin")
    root = Path(tempfile.mkdtemp(prefix="rubric-bench-pg-"))
    data_dir = root / "data"
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    port = _free_port()
    pg_ctl = str(bindir / "pg_ctl")
    try:
        subprocess.run(
            _as_postgres([str(bindir / "initdb"), "-D", str(data_dir), "-A", "trust", "-U", "rubric", "-E", "UTF8"]),
            check=True,
            capture_output=True,
        )
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
        subprocess.run(
            _as_postgres([pg_ctl, "-D", str(data_dir), "-o", options, "-l", str(root / "log"), "-w", "start"]),
            check=True,
            capture_output=True,
        )
        yield f"postgresql+psycopg://rubric@127.0.0.1:{port}"
    finally:
        subprocess.run(
            _as_postgres([pg_ctl, "-D", str(data_dir), "-m", "immediate", "stop"]), capture_output=True, check=False
        )
        shutil.rmtree(root, ignore_errors=True)


def create_database(url_base: str, name: str) -> str:
    """Create the (empty) database ``name`` on the cluster at ``url_base``; return its SQLAlchemy URL."""
    if not _NAME.fullmatch(name):
        # CREATE DATABASE takes no bound parameter for the name: accept only plain lower-case identifiers.
        raise ValueError(f"not a plain database name: {name!r}")
    admin = create_engine(f"{url_base}/postgres", isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE {name}"))
    finally:
        admin.dispose()
    return f"{url_base}/{name}"


if __name__ == "__main__":
    with local_postgres() as base:
        url = create_database(base, "smoke")
        engine = create_engine(url)
        with engine.connect() as conn:
            print(url, conn.execute(text("SELECT version()")).scalar_one())
        engine.dispose()
        print(DURABILITY_NOTE)
