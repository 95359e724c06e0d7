"""Reproducibility bundles (issue 13 §1): dl19-dev round trips SQLite → PostgreSQL → SQLite byte for byte.

One dl19-dev source per module (the session's import, plus official ranks, judges' overrides, an
override event and a flag), one bundle of it; each test imports or verifies that bundle, or a
copy rebuilt with one change (a tampered byte, a hostile member, a bad row).
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from app.cli import app
from app.collections.bundle import EXCLUDED_TABLES, MANIFEST, SETTING_KEYS, bundle_tables, member_names
from app.collections.service import get_collection
from app.config import get_settings
from app.db import engine_for, session_scope
from app.leaderboards.service import LeaderboardRequest
from app.models import Base, Collection, Grade, GradeOverride, ItemFlag, OverrideEvent, Query
from app.review.flags import flag_item
from app.review.overrides import record
from tests.conftest import (
    TEST_DATA,
    Database,
    PostgresServer,
    Seeded,
    _postgres_database,
    _sqlite_copy,
    build_seeded,
    forget_process_caches,
    restore_seeded,
)
from tests.helpers import cli

OFFICIAL = TEST_DATA / "dl19_paper_official_ranks.json"
# Every kind of setting, judges' work included: a trec measure at a level, per-query correlation,
# significance, overrides and flags.
SETTINGS = (
    *("--measure", "NDCG@10", "--min-rating", "4", "--bootstrap", "200", "--seed", "7"),
    *("--overrides", "--exclude-flagged", "--per-query-correlation", "--significance", "--trials", "200"),
)


@dataclass(frozen=True)
class Source:
    seeded: Seeded
    bundle: Path
    members: dict[str, bytes]


def _judge(db: Database) -> None:
    """Three overrides through the judges' own path (each logs an event), one undone-free flag."""
    with session_scope() as session:
        collection = get_collection(session, "dl19")
        grades = session.scalars(select(Grade).where(Grade.self_rating.is_not(None)).order_by(Grade.id).limit(3)).all()
        for grade in grades:
            rating = 5 - (grade.self_rating or 0)
            record(
                session,
                collection,
                grade.pool_entry_pk,
                grade.item_id,
                action="set",
                judge="ann",
                rating=rating,
                grader_pk=grade.grader_pk,
            )
        flag_item(session, collection, grades[-1].item_id, judge="ann", reason="off-topic")


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def source(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Source:
    dev: Seeded = request.getfixturevalue("seeded_dev_sqlite")
    server: PostgresServer | None = request.getfixturevalue("postgres_server")
    out = tmp_path_factory.mktemp("bundle") / "dl19.tar.gz"

    def seed(db: Database, _monkeypatch: pytest.MonkeyPatch) -> None:
        restore_seeded(db, dev, server)
        cli("import", "dl19", "--official", str(OFFICIAL))
        _judge(db)
        cli("export", "bundle", "dl19", "--out", str(out), *SETTINGS)

    seeded = build_seeded(
        "sqlite",
        seed,
        tmp_path_factory.mktemp("bundle-source"),
        request.getfixturevalue("sqlite_template"),
        server,
        request.getfixturevalue("postgres_template"),
    )
    return Source(seeded, out, _members(out))


@pytest.fixture
def use_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """Point the CLI at a database (RUBRIC_DATABASE_URL); dispose of every engine opened after."""
    urls: list[str] = []

    def use(url: str) -> None:
        urls.append(url)
        monkeypatch.setenv("RUBRIC_DATABASE_URL", url)
        get_settings.cache_clear()
        forget_process_caches()

    yield use
    for url in urls:
        engine_for(url).dispose()
    engine_for.cache_clear()
    get_settings.cache_clear()


def _run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def _rebuild(source: Path, out: Path, change: Callable[[dict[str, bytes]], dict[str, bytes]]) -> Path:
    """The bundle with its members changed by ``change`` (names and order as ``change`` returns them)."""
    members = change(_members(source))
    with tarfile.open(out, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def _with_hashes(members: dict[str, bytes]) -> dict[str, bytes]:
    """Rewrite the manifest's hashes and sizes to the members' bytes, as a forger would."""
    import hashlib

    manifest = json.loads(members[MANIFEST])
    for entry in manifest["members"]:
        data = members[entry["name"]]
        entry["sha256"], entry["size"] = hashlib.sha256(data).hexdigest(), len(data)
    return {**members, MANIFEST: json.dumps(manifest).encode()}


def _count(model: type[Base]) -> int:
    with session_scope() as session:
        return session.scalar(select(func.count()).select_from(model)) or 0


@pytest.mark.postgres
def test_round_trip_sqlite_postgres_sqlite_is_byte_identical(
    source: Source,
    tmp_path: Path,
    sqlite_template: Path,
    postgres_server: PostgresServer | None,
    postgres_template: str | None,
    use_url: Callable[[str], None],
) -> None:
    if postgres_server is None or postgres_template is None:
        pytest.skip("PostgreSQL server binaries not installed (set RUBRIC_REQUIRE_POSTGRES=1 to make this fail)")
    manifest = json.loads(source.members[MANIFEST])
    argv = manifest["leaderboard"]["argv"]
    assert argv[:3] == ["rubric", "leaderboard", "dl19"] and "--overrides" in argv and "--grader" in argv
    board = source.members["leaderboard.json"]
    assert json.loads(board)["settings"]["include_overrides"] is True

    use_url(_postgres_database(postgres_server, postgres_template))
    assert cli("import", "bundle", source.bundle).strip() == manifest["leaderboard"]["command"]
    assert cli(*argv[1:]).encode() == board
    # the judges' work travelled: the three overrides, their events (who, when) and the flag
    assert (_count(GradeOverride), _count(OverrideEvent), _count(ItemFlag)) == (3, 3, 1)

    again = tmp_path / "from-postgres.tar.gz"
    cli("export", "bundle", "dl19", "--out", again, *SETTINGS)
    from_postgres = _members(again)
    # a directory where the file goes is the user's mistake (exit 2), and no partial file is left beside it
    assert "cannot write" in cli("export", "bundle", "dl19", "--out", tmp_path, *SETTINGS, expect=2)
    assert [p.name for p in tmp_path.iterdir()] == [again.name]
    # every table and the board are the same bytes, whichever database wrote them
    assert {n: d for n, d in from_postgres.items() if n != MANIFEST} == {
        n: d for n, d in source.members.items() if n != MANIFEST
    }

    use_url(_sqlite_copy(tmp_path, sqlite_template))
    cli("import", "bundle", again)
    assert cli(*argv[1:]).encode() == board


def test_verify_recomputes_and_names_what_differs(source: Source, tmp_path: Path) -> None:
    code, _, err = _run("verify", "bundle", source.bundle)
    assert code == 0, err
    assert "byte for byte" in err

    def tamper(members: dict[str, bytes]) -> dict[str, bytes]:
        grades = bytearray(members["tables/grade.jsonl"])
        grades[grades.index(b'"self_rating":') + 14] ^= 1  # one byte of one grade
        return {**members, "tables/grade.jsonl": bytes(grades)}

    code, _, err = _run("verify", "bundle", _rebuild(source.bundle, tmp_path / "t.tar.gz", tamper))
    assert code == 1 and "'tables/grade.jsonl': sha256 differs" in err

    def forge_board(members: dict[str, bytes]) -> dict[str, bytes]:  # hashes fixed up: only recomputing tells
        board = members["leaderboard.json"].replace(b'"top_k": 20', b'"top_k": 21', 1)
        return _with_hashes({**members, "leaderboard.json": board})

    code, _, err = _run("verify", "bundle", _rebuild(source.bundle, tmp_path / "f.tar.gz", forge_board))
    assert code == 1 and "leaderboard.json: line" in err and "top_k" in err


def test_import_refuses_a_database_in_use_and_another_schema(
    source: Source, tmp_path: Path, sqlite_template: Path, use_url: Callable[[str], None]
) -> None:
    use_url(f"sqlite:///{source.seeded.source}")
    code, _, err = _run("import", "bundle", source.bundle)
    assert code == 2 and "empty database only" in err

    def older(members: dict[str, bytes]) -> dict[str, bytes]:
        manifest = json.loads(members[MANIFEST])
        manifest["schema_revision"] = "0001"
        return {**members, MANIFEST: json.dumps(manifest).encode()}

    use_url(_sqlite_copy(tmp_path, sqlite_template))
    code, _, err = _run("import", "bundle", _rebuild(source.bundle, tmp_path / "old.tar.gz", older))
    assert code == 2 and "schema revision '0001' differs" in err


def test_a_bad_row_names_member_line_and_field_and_leaves_the_database_empty(
    source: Source, tmp_path: Path, sqlite_template: Path, use_url: Callable[[str], None]
) -> None:
    source_members = source.members
    last = [n for n in member_names() if source_members[n].count(b"\n") >= 2][-1]  # a table imported late

    def bad_row(members: dict[str, bytes]) -> dict[str, bytes]:
        lines = members[last].splitlines(keepends=True)
        row = json.loads(lines[1])
        row[next(iter(row))] = "not a number"
        lines[1] = json.dumps(row).encode() + b"\n"
        return _with_hashes({**members, last: b"".join(lines)})

    use_url(_sqlite_copy(tmp_path, sqlite_template))
    code, _, err = _run("import", "bundle", _rebuild(source.bundle, tmp_path / "bad.tar.gz", bad_row))
    assert code == 2 and f"{last}, line 2, field" in err
    assert _count(Collection) == _count(Query) == 0  # one transaction: the tables imported before it are gone too


def test_rows_no_importer_lets_in_are_refused_not_stored(
    source: Source, tmp_path: Path, sqlite_template: Path, use_url: Callable[[str], None]
) -> None:
    """NaN in a number, NUL in a text, brackets nested past the stack: exit 2 naming the field, nothing stored."""
    first_grade = source.members["tables/grade.jsonl"].splitlines()[0]
    row = json.loads(first_grade)
    hostile = {
        "nan": (json.dumps(row | {"expected_grade": float("nan")}).encode(), "line 1, field 'expected_grade': must be"),
        "nul": (json.dumps(row | {"item_id": "a\x00b"}).encode(), "line 1, field 'item_id': contains a NUL"),
        "deep": (b"[" * 100_000, "line 1: not a JSON line"),
    }
    use_url(_sqlite_copy(tmp_path, sqlite_template))
    for name, (line, message) in hostile.items():

        def change(members: dict[str, bytes], line: bytes = line) -> dict[str, bytes]:
            grades = members["tables/grade.jsonl"]
            return _with_hashes({**members, "tables/grade.jsonl": grades.replace(first_grade, line, 1)})

        code, _, err = _run("import", "bundle", _rebuild(source.bundle, tmp_path / f"{name}.tar.gz", change))
        assert code == 2 and f"tables/grade.jsonl, {message}" in err, err
    assert _count(Collection) == 0


def _tar_gz(entries: list[tarfile.TarInfo], data: bytes = b"{}") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info in entries:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buffer.getvalue()


def _file(name: str, size: int = 2) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    return info


def _link(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
    return info


def _bomb() -> bytes:
    """A gzip of 64 MiB that inflates from ~64 KiB: one member that declares all of it."""
    header = _file("tables/grade.jsonl", 64 * 1024 * 1024).tobuf(tarfile.PAX_FORMAT)
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=9) as packed:
        packed.write(header)
        zeros = bytes(1024 * 1024)
        for _ in range(64):
            packed.write(zeros)
    return buffer.getvalue()


def _pax_bomb() -> bytes:
    """A pax header that declares 64 MiB: tarfile would read it whole into memory."""
    header = tarfile.TarInfo("././@PaxHeader")
    header.type, header.size = tarfile.XHDTYPE, 64 * 1024 * 1024
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=9) as packed:
        packed.write(header.tobuf(tarfile.USTAR_FORMAT))
        packed.write(bytes(1024 * 1024))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("archive", "message"),
    [
        (lambda: _tar_gz([_file("../x")]), "unsafe name"),
        (lambda: _tar_gz([_link(MANIFEST)]), "not a regular file"),
        (lambda: _tar_gz([_file("evil.txt")]), "first member must be manifest.json"),
        (lambda: _tar_gz([_file(MANIFEST), _file(MANIFEST)]), "not a rubric-bundle manifest"),
        (_bomb, "over the limit"),
        (_pax_bomb, "extended tar header"),
        (lambda: b"\x1f\x8b" + b"garbage" * 10, "not a readable tar.gz"),
        (lambda: b"plain text", "not a gzip-compressed tar"),
    ],
    ids=["dotdot", "symlink", "unexpected", "not-a-manifest", "gzip-bomb", "pax-bomb", "corrupt", "not-gzip"],
)
def test_hostile_bundles_are_refused_with_exit_2(
    archive: Callable[[], bytes], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUBRIC_MAX_DECOMPRESSED_MB", "16")
    get_settings.cache_clear()
    path = tmp_path / "hostile.tar.gz"
    path.write_bytes(archive())
    code, _, err = _run("verify", "bundle", path)
    get_settings.cache_clear()
    assert code == 2 and message in err, err
    assert not (tmp_path / "x").exists() and not list(tmp_path.glob("tables*"))  # nothing was extracted


def test_every_table_is_bundled_or_left_out_on_purpose() -> None:
    """A new table must be scoped to a collection (it then travels) or named in EXCLUDED_TABLES."""
    bundled = {t.name for t in bundle_tables()}
    assert bundled | set(EXCLUDED_TABLES) == set(Base.metadata.tables)
    assert {"grade", "grade_cache", "grader", "grade_override", "override_event", "item_flag"} <= bundled
    assert {"app_user", "auth_session", "job"} <= set(EXCLUDED_TABLES)


def test_the_manifest_names_every_setting_of_a_leaderboard_request() -> None:
    """A new field of LeaderboardRequest must reach the manifest and its command, or bundles stop reproducing."""
    assert set(LeaderboardRequest.__dataclass_fields__) <= set(SETTING_KEYS)
