"""Fixtures: real SQLite and PostgreSQL databases built by ``alembic upgrade head``, and the shared data."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session

from app.config import get_settings
from app.db import engine_for, make_engine, session_factory
from app.migrate import upgrade

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"
DL19_DEV = SHARED_DATA / "dl19-dev"
TEST_DATA = Path(__file__).resolve().parent / "data"
# Persisted evaluation snapshots (docs/snapshots.md) of this test process and of the CLI processes
# it starts go to a directory of their own, never to the user's cache; removed at exit.
SNAPSHOT_DIR = Path(tempfile.mkdtemp(prefix="rubric-test-snapshots-"))
os.environ["RUBRIC_SNAPSHOT_CACHE_DIR"] = str(SNAPSHOT_DIR)
atexit.register(shutil.rmtree, SNAPSHOT_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def dl19_dev() -> Path:
    """The shared DL19 dev files. Absent in CI (``CI`` set), a test that needs them fails; elsewhere it skips."""
    if not (DL19_DEV / "passages-graded.jsonl.gz").is_file():
        message = f"shared data not found at {DL19_DEV}"
        if os.environ.get("CI"):
            pytest.fail(f"{message}: CI must run the tests that need the DL19 dev data")
        pytest.skip(f"{message} (tests that need the DL19 dev data are skipped)")
    return DL19_DEV


@pytest.fixture(scope="session")
def autojudge() -> ModuleType:
    """``autojudge_base`` imported offline (tests/interop.py); fails in CI and skips elsewhere when not installed."""
    from tests.interop import autojudge as import_autojudge

    return import_autojudge()


# -- PostgreSQL: a throwaway cluster started by the fixture ------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _postgres_bin() -> Path | None:
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), reverse=True)
    return candidates[0].parent if candidates else None


def _as_postgres(args: list[str]) -> list[str]:
    # initdb and postgres refuse to run as root; Debian's package creates the postgres user.
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


@dataclass
class PostgresServer:
    url_base: str
    data_dir: Path
    bindir: Path

    def stop(self) -> None:
        subprocess.run(
            _as_postgres([str(self.bindir / "pg_ctl"), "-D", str(self.data_dir), "-m", "immediate", "stop"]),
            capture_output=True,
            check=False,
        )
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer | None]:
    bindir = _postgres_bin()
    if bindir is None:
        if os.environ.get("RUBRIC_REQUIRE_POSTGRES") == "1":
            pytest.fail("PostgreSQL is required (RUBRIC_REQUIRE_POSTGRES=1) but no server binaries were found")
        yield None
        return
    root = Path(tempfile.mkdtemp(prefix="rubric-pg-"))
    data_dir = root / "data"
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    port = _free_port()
    subprocess.run(
        _as_postgres([str(bindir / "initdb"), "-D", str(data_dir), "-A", "trust", "-U", "rubric", "-E", "UTF8"]),
        check=True,
        capture_output=True,
    )
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
    subprocess.run(
        _as_postgres(
            [str(bindir / "pg_ctl"), "-D", str(data_dir), "-o", options, "-l", str(root / "log"), "-w", "start"]
        ),
        check=True,
        capture_output=True,
    )
    server = PostgresServer(f"postgresql+psycopg://rubric@127.0.0.1:{port}", data_dir, bindir)
    yield server
    server.stop()


# -- databases -------------------------------------------------------------------------------


@dataclass
class Database:
    url: str
    engine: Engine
    backend: str

    def session(self) -> Session:
        return session_factory(self.engine)()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "template.sqlite"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def postgres_template(postgres_server: PostgresServer | None) -> str | None:
    if postgres_server is None:
        return None
    admin = create_engine(f"{postgres_server.url_base}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text("CREATE DATABASE rubric_template"))
    admin.dispose()
    upgrade(f"{postgres_server.url_base}/rubric_template")
    engine_for.cache_clear()
    return "rubric_template"


def _postgres_database(server: PostgresServer, template: str) -> str:
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(f"{server.url_base}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name} TEMPLATE {template}"))
    admin.dispose()
    return f"{server.url_base}/{name}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    sqlite_template: Path,
    postgres_server: PostgresServer | None,
    postgres_template: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Database]:
    """A fresh, migrated database on each backend; RUBRIC_DATABASE_URL points at it for the CLI."""
    if request.param == "sqlite":
        url = _sqlite_copy(tmp_path, sqlite_template)
    else:
        if postgres_server is None or postgres_template is None:
            pytest.skip("PostgreSQL server binaries not installed (set RUBRIC_REQUIRE_POSTGRES=1 to make this fail)")
        url = _postgres_database(postgres_server, postgres_template)
    yield from _use_database(url, request.param, monkeypatch)


@pytest.fixture
def sqlite_db(tmp_path: Path, sqlite_template: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Database]:
    """A fresh SQLite database only (for tests whose behaviour does not depend on the backend)."""
    yield from _use_database(_sqlite_copy(tmp_path, sqlite_template), "sqlite", monkeypatch)


def _sqlite_copy(tmp_path: Path, template: Path) -> str:
    path = tmp_path / "rubric.sqlite"
    shutil.copy(template, path)
    return f"sqlite:///{path}"


def _use_database(url: str, backend: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Database]:
    """Point RUBRIC_DATABASE_URL (for the CLI) at ``url`` for one test, and clean the caches after."""
    monkeypatch.setenv("RUBRIC_DATABASE_URL", url)
    get_settings.cache_clear()
    engine = make_engine(url)
    yield Database(url, engine, backend)
    _drain_embedded_worker()
    engine.dispose()
    engine_for(url).dispose()
    engine_for.cache_clear()
    get_settings.cache_clear()


EMBEDDED_DRAIN_SECONDS = 600


def _drain_embedded_worker() -> None:
    """Wait, before the test's database goes, until the embedded worker holds none of its jobs.

    The worker's threads are process-wide: a job a test launched without waiting for it (a POST
    to ``/c/{name}/jobs`` in the role tests) goes on after the test. Its thread calls
    ``get_settings()`` while the fixtures switch RUBRIC_DATABASE_URL, and a call that straddles
    the switch caches the settings of the moment in between, when no database is set: the next
    test then imports into an empty ``./rubric.sqlite`` ("no such table: collection").
    """
    from app.jobs.embedded import embedded_worker

    if embedded_worker.cache_info().currsize == 0:  # no test of this session started one
        return
    worker, deadline = embedded_worker(), time.monotonic() + EMBEDDED_DRAIN_SECONDS
    while not worker.idle():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the embedded worker still runs this test's jobs after {EMBEDDED_DRAIN_SECONDS} s")
        time.sleep(0.05)


# -- seeded databases: built once per session and backend, copied into each test's database -----


@dataclass(frozen=True)
class Seeded:
    """A database seeded once: the SQLite file, or the PostgreSQL database used as a template."""

    backend: str
    source: str


def build_seeded(
    backend: str,
    seed: Callable[[Database, pytest.MonkeyPatch], object],
    directory: Path,
    sqlite_template: Path,
    postgres_server: PostgresServer | None,
    postgres_template: str | None,
) -> Seeded:
    """Run ``seed`` on a fresh migrated database, then close every connection (a template must have none)."""
    if backend == "sqlite":
        url = _sqlite_copy(directory, sqlite_template)
    else:
        if postgres_server is None or postgres_template is None:
            pytest.skip("PostgreSQL server binaries not installed (set RUBRIC_REQUIRE_POSTGRES=1 to make this fail)")
        url = _postgres_database(postgres_server, postgres_template)
    with pytest.MonkeyPatch.context() as monkeypatch:
        using = _use_database(url, backend, monkeypatch)
        try:
            seed(next(using), monkeypatch)
        finally:
            next(using, None)  # drains the embedded worker and disposes every engine
    return Seeded(backend, url.removeprefix("sqlite:///") if backend == "sqlite" else url.rsplit("/", 1)[1])


def restore_seeded(db: Database, seeded: Seeded, postgres_server: PostgresServer | None) -> None:
    """Make ``db`` a copy of ``seeded`` under its own URL, so the test's fixtures and the CLI still agree.

    The copy has the seed's ids, revisions and structure tokens: the per-process caches keyed by
    them (not by the database URL) would alias another test's copy, so they are forgotten here.
    """
    db.engine.dispose()
    engine_for(db.url).dispose()
    if seeded.backend == "sqlite":
        target_path = db.url.removeprefix("sqlite:///")
        with closing(sqlite3.connect(seeded.source)) as source, closing(sqlite3.connect(target_path)) as target:
            source.backup(target)  # WAL-safe, unlike a file copy
    else:
        assert postgres_server is not None
        name = db.url.rsplit("/", 1)[1]
        admin = create_engine(f"{postgres_server.url_base}/postgres", isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE {name} WITH (FORCE)"))
            conn.execute(text(f"CREATE DATABASE {name} TEMPLATE {seeded.source}"))
        admin.dispose()
    forget_process_caches()


def _seeded_web(
    backend: str,
    tmp_path_factory: pytest.TempPathFactory,
    sqlite_template: Path,
    postgres_server: PostgresServer | None,
    postgres_template: str | None,
) -> Seeded:
    from tests.web.conftest import seed_web

    directory = tmp_path_factory.mktemp(f"web-seed-{backend}")
    return build_seeded(
        backend,
        lambda db, monkeypatch: seed_web(db, directory, monkeypatch),
        directory,
        sqlite_template,
        postgres_server,
        postgres_template,
    )


@pytest.fixture(scope="session")
def seeded_web_sqlite(
    tmp_path_factory: pytest.TempPathFactory,
    sqlite_template: Path,
    postgres_server: PostgresServer | None,
    postgres_template: str | None,
) -> Seeded:
    """``seed_web`` once per session (importing and grading take seconds): ``web_db`` copies it.

    Here, not in tests/web/conftest.py, so that a test module elsewhere that imports ``web_db`` finds it.
    """
    return _seeded_web("sqlite", tmp_path_factory, sqlite_template, postgres_server, postgres_template)


@pytest.fixture(scope="session")
def seeded_web_postgresql(
    tmp_path_factory: pytest.TempPathFactory,
    sqlite_template: Path,
    postgres_server: PostgresServer | None,
    postgres_template: str | None,
) -> Seeded:
    """``seed_web`` once per session on PostgreSQL: ``web_db_any`` copies it."""
    return _seeded_web("postgresql", tmp_path_factory, sqlite_template, postgres_server, postgres_template)


def forget_process_caches() -> None:
    """Empty the in-process caches whose keys hold a collection's id, revision or structure token."""
    from app import kept
    from app.collections import snapshot
    from app.leaderboards import service as leaderboards

    snapshot.clear_files()  # a SQLite copy restored in place keeps its inode: its files would alias
    kept.clear_all()  # every per-process cache that is a Kept
    leaderboards.clear()  # also what it keeps outside a Kept (recompute.py's evaluations, for now)


# -- Redis: a throwaway server on a loopback port --------------------------------------------


@dataclass
class RedisServer:
    port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        # appendonly: queued Celery messages survive a restart, as on a production Redis.
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "yes",
                "--dir",
                str(self.directory),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A real redis-server (Debian's package, installed by scripts/bootstrap.sh)."""
    if shutil.which("redis-server") is None:
        if os.environ.get("RUBRIC_REQUIRE_REDIS") == "1":
            pytest.fail("redis-server is required (RUBRIC_REQUIRE_REDIS=1) but not installed")
        pytest.skip("redis-server not installed")
    server = RedisServer(_free_port(), tmp_path / "redis")
    server.directory.mkdir()
    server.start()
    yield server
    server.stop()


# -- dl19-dev seeded once per session and backend (H6) -----------------------------------------


def _seeded_dev(backend: str, request: pytest.FixtureRequest) -> Seeded:
    from tests.helpers import import_dev

    dl19_dev: Path = request.getfixturevalue("dl19_dev")
    directory = request.getfixturevalue("tmp_path_factory").mktemp(f"dev-seed-{backend}")
    return build_seeded(
        backend,
        lambda db, monkeypatch: import_dev(dl19_dev),
        directory,
        request.getfixturevalue("sqlite_template"),
        request.getfixturevalue("postgres_server"),
        request.getfixturevalue("postgres_template"),
    )


@pytest.fixture(scope="session")
def seeded_dev_sqlite(request: pytest.FixtureRequest) -> Seeded:
    """``import_dev`` (collection ``dl19``, no official ranks) once per session: the import takes 3-6 s."""
    return _seeded_dev("sqlite", request)


@pytest.fixture(scope="session")
def seeded_dev_postgresql(request: pytest.FixtureRequest) -> Seeded:
    """``import_dev`` once per session on PostgreSQL, where the import takes 5-8 s."""
    return _seeded_dev("postgresql", request)


@pytest.fixture
def dev_database(
    database: Database, request: pytest.FixtureRequest, postgres_server: PostgresServer | None
) -> Database:
    """``database`` (each backend) holding a private copy of the session's dl19-dev import."""
    seeded: Seeded = request.getfixturevalue(f"seeded_dev_{database.backend}")
    restore_seeded(database, seeded, postgres_server)
    return database


@pytest.fixture
def dev_sqlite_database(sqlite_db: Database, seeded_dev_sqlite: Seeded) -> Database:
    """``sqlite_db`` holding a private copy of the session's dl19-dev import (tests that need one backend)."""
    restore_seeded(sqlite_db, seeded_dev_sqlite, None)
    return sqlite_db


# -- end of the dl19-dev seeds (H6) ------------------------------------------------------------
