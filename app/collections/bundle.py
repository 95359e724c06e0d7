"""Reproducibility bundles: one collection's leaderboard with everything it depends on, in one tar.gz.

A bundle holds ``manifest.json`` (first), ``graders.json``, ``leaderboard.json`` (the exact bytes
``rubric leaderboard … --format json`` prints) and ``tables/<table>.jsonl``: every row of this
collection in every table a leaderboard reads, every column of the SQLAlchemy metadata (so a new
column travels without a change here), ordered by primary key. The grader and grade-cache tables
are shared between collections: a bundle holds the graders and cache entries its grades use.

Import keeps the primary keys, so the manifest's ``--grader ID`` names the same grader in the
target database; it needs an empty database (no collection, no grader) of the same schema revision.
Reading never extracts to disk: only the expected member names, regular files, in the manifest's
order, within the member count and the decompressed-size limit (RUBRIC_MAX_DECOMPRESSED_MB).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import shlex
import tarfile
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata as package_metadata
from pathlib import Path
from typing import IO, Any

from sqlalchemy import JSON, Boolean, ColumnElement, DateTime, Float, Integer, String, Table, insert, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.collections.errors import ImportFormatError
from app.collections.graders import resolve_grader
from app.collections.limits import MB, _InflateLimit
from app.config import get_settings
from app.errors import Conflict, Invalid, TooLarge, TooMany
from app.grading.prompts import UnknownPromptClass, get_prompt_class
from app.leaderboards import measures, params
from app.leaderboards.analysis import leaderboard_analysis, leaderboard_analysis_json
from app.leaderboards.measures import TrecMeasure
from app.leaderboards.service import LeaderboardRequest, check_request
from app.models import Base, Collection, Grader

FORMAT = "rubric-bundle"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
GRADERS = "graders.json"
LEADERBOARD = "leaderboard.json"
# Tables no leaderboard reads, left out on purpose: accounts and sign-in state (secrets, and not
# the collection's), and job history (how grades were produced, not what they are).
EXCLUDED_TABLES = {
    "app_user": "accounts",
    "auth_session": "sign-in sessions",
    "login_throttle": "sign-in throttle",
    "job": "job history",
    "job_batch": "job history",
}
SHARED_TABLES = ("grader", "grade_cache")  # not owned by a collection: the rows the collection's grades use
MAX_MEMBERS = 64
MAX_MANIFEST_BYTES = 1 * MB
MAX_HEADER_BYTES = 64 * 1024
EXTENDED_HEADERS = frozenset(
    (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
)
INSERT_BATCH = 5000
_build_lock = threading.Lock()


class BundleMismatch(Invalid):
    """A member's bytes differ from their sha256 in the manifest (``verify`` reports these as exit 1)."""


# ---- the leaderboard a bundle reproduces ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BoardSettings:
    """Every setting of the bundled leaderboard, explicit: no environment default can change it.

    ``request`` is checked and names its grader by id; ``per_query_level`` is the manual judgments'
    level of the per-query correlation (None: none; always None for Cover, which has no manual side).
    """

    request: LeaderboardRequest
    per_query_level: int | None = None
    significance: bool = False
    trials: int = params.DEFAULT_TRIALS

    def as_json(self) -> dict[str, Any]:
        r = self.request
        return {
            "measure": r.measure.name,
            "grader_id": r.grader_id,
            "min_rating": r.min_rating,
            "top_k": r.top_k,
            "label": r.label,
            "rubric_version": r.rubric_version,
            "reference_rounding": r.reference_rounding,
            "bootstrap_samples": r.bootstrap_samples,
            "bootstrap_seed": r.bootstrap_seed,
            "include_overrides": r.include_overrides,
            "exclude_flagged": r.exclude_flagged,
            "per_query_level": self.per_query_level,
            "significance": self.significance,
            "trials": self.trials,
        }


SETTING_KEYS = tuple(BoardSettings(LeaderboardRequest(measures.DEFAULT, grader_id=1)).as_json())


def board_settings(
    request: LeaderboardRequest, *, per_query_level: int | None = None, significance: bool = False, trials: int = 0
) -> BoardSettings:
    """Checked settings: every bound of the leaderboard page and command (Invalid otherwise)."""
    check_request(request)
    if request.grader_id is None:
        raise Invalid("a bundle's leaderboard names its grader by id")
    params.bounded("grader", request.grader_id, params.ID)
    params.bounded("trials", trials or params.DEFAULT_TRIALS, params.TRIALS)
    # only a trec_eval measure has a manual counterpart (the leaderboard ignores the level otherwise)
    level = per_query_level if isinstance(request.measure, TrecMeasure) else None
    if level is not None:
        params.bounded("min_judgment", level, params.MANUAL_LEVEL)
    return BoardSettings(request, level, significance, trials or params.DEFAULT_TRIALS)


def settings_from_json(raw: Any, where: str = MANIFEST) -> BoardSettings:
    """The manifest's structured settings, checked as the command line would check them."""
    names = set(SETTING_KEYS)
    if not isinstance(raw, dict) or set(raw) != names:
        raise ImportFormatError(where, None, "leaderboard.settings", f"must be an object with the keys {sorted(names)}")
    types = {"measure": str, "label": str, "reference_rounding": bool, "include_overrides": bool}
    types |= {"exclude_flagged": bool, "significance": bool}
    for key, value in raw.items():
        wanted = types.get(key, int)
        optional = key in ("min_rating", "rubric_version", "per_query_level")
        typed = isinstance(value, wanted) and (wanted is bool or not isinstance(value, bool))
        if typed or (value is None and optional):
            continue
        raise ImportFormatError(where, None, f"leaderboard.settings.{key}", f"must be {wanted.__name__}")
    request = LeaderboardRequest(
        measure=raw["measure"],
        grader_id=raw["grader_id"],
        min_rating=raw["min_rating"],
        top_k=raw["top_k"],
        label=raw["label"],
        rubric_version=raw["rubric_version"],
        reference_rounding=raw["reference_rounding"],
        bootstrap_samples=raw["bootstrap_samples"],
        bootstrap_seed=raw["bootstrap_seed"],
        include_overrides=raw["include_overrides"],
        exclude_flagged=raw["exclude_flagged"],
    )
    params.bounded("bootstrap_seed", request.bootstrap_seed, (0, 2**32 - 1))
    return board_settings(
        request, per_query_level=raw["per_query_level"], significance=raw["significance"], trials=raw["trials"]
    )


def leaderboard_argv(collection_name: str, settings: BoardSettings) -> list[str]:
    """``rubric leaderboard NAME … --format json`` with every setting spelled out."""
    r = settings.request
    argv = ["rubric", "leaderboard", collection_name, "--measure", r.measure.name, "--grader", str(r.grader_id)]
    if r.min_rating is not None:
        argv += ["--min-rating", str(r.min_rating)]
    argv += ["--top-k", str(r.top_k), "--label", r.label]
    argv += ["--bootstrap", str(r.bootstrap_samples), "--seed", str(r.bootstrap_seed)]
    if r.rubric_version is not None:
        argv += ["--rubric-version", str(r.rubric_version)]
    flags = [(r.reference_rounding, "--reference-rounding"), (r.include_overrides, "--overrides")]
    argv += [flag for on, flag in [*flags, (r.exclude_flagged, "--exclude-flagged")] if on]
    if settings.per_query_level is not None:
        argv += ["--per-query-correlation", "--min-judgment", str(settings.per_query_level)]
    if settings.significance:
        argv += ["--significance", "--trials", str(settings.trials)]
    return [*argv, "--format", "json"]


def leaderboard_text(session: Session, collection: Collection, settings: BoardSettings) -> str:
    """What ``rubric leaderboard`` prints for ``settings`` (``--format json``), final newline included."""
    result = leaderboard_analysis(
        session,
        collection,
        check_request(settings.request),
        per_query_level=settings.per_query_level,
        significance=settings.significance,
        trials=settings.trials,
    )
    return json.dumps(leaderboard_analysis_json(result), indent=1) + "\n"


# ---- tables ----------------------------------------------------------------------------------


def bundle_tables() -> list[Table]:
    """Every table a bundle holds, parents before children (the import order)."""
    return [t for t in Base.metadata.sorted_tables if t.name not in EXCLUDED_TABLES]


def member_names() -> list[str]:
    """The members after the manifest, in the order a bundle stores them."""
    return [GRADERS, LEADERBOARD, *(f"tables/{t.name}.jsonl" for t in bundle_tables())]


def _owned_rows(table: Table, collection_id: int) -> ColumnElement[bool]:
    """The rows of ``table`` that belong to the collection: by ``collection_id``, else through a parent's key."""
    if table.name == "collection":
        return table.c.id == collection_id
    if "collection_id" in table.c:
        return table.c.collection_id == collection_id
    for fk in sorted(table.foreign_keys, key=lambda fk: fk.parent.name):
        parent = fk.column.table
        if parent.name not in EXCLUDED_TABLES and parent.name not in SHARED_TABLES:
            return fk.parent.in_(select(fk.column).where(_owned_rows(parent, collection_id)))
    raise RuntimeError(f"table {table.name!r} belongs to no collection: scope it or add it to EXCLUDED_TABLES")


def _grader_ids(session: Session, collection: Collection) -> list[int]:
    """The graders with grades in the collection, its primary grader, and those override events name."""
    grade, event = Base.metadata.tables["grade"], Base.metadata.tables["override_event"]
    ids = set(session.scalars(select(grade.c.grader_pk).where(grade.c.collection_id == collection.id).distinct()))
    ids |= set(
        session.scalars(
            select(event.c.grader_pk).where(event.c.collection_id == collection.id, event.c.grader_pk.is_not(None))
        )
    )
    if collection.primary_grader_id is not None:
        ids.add(collection.primary_grader_id)
    return sorted(ids)


def _selected_rows(table: Table, collection: Collection, grader_ids: list[int]) -> ColumnElement[bool]:
    if table.name == "grader":
        return table.c.id.in_(grader_ids)
    if table.name == "grade_cache":
        grade = Base.metadata.tables["grade"]
        return table.c.key.in_(select(grade.c.cache_key).where(grade.c.collection_id == collection.id))
    return _owned_rows(table, collection.id)


def _encode(column: Any, value: Any) -> Any:
    if value is None or not isinstance(column.type, DateTime):
        return value
    aware = value if value.tzinfo else value.replace(tzinfo=UTC)  # SQLite hands back UTC without its offset
    return aware.astimezone(UTC).isoformat()


def _dump_table(session: Session, table: Table, where: ColumnElement[bool], out: IO[bytes]) -> int:
    """Write the rows as JSON lines, ordered by primary key; return how many."""
    count = 0
    order = list(table.primary_key.columns)
    columns = list(table.columns)
    for row in session.execute(select(table).where(where).order_by(*order)).yield_per(INSERT_BATCH):
        record = {c.name: _encode(c, value) for c, value in zip(columns, row, strict=True)}
        out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")
        count += 1
    return count


# ---- graders.json ----------------------------------------------------------------------------


def grader_record(grader: Grader) -> dict[str, Any]:
    """A grader's configuration with its prompt template texts, when the built-in prompt class still has them."""
    identity = grader.identity or {}
    record: dict[str, Any] = {
        "id": grader.id,
        "model": grader.model,
        "model_revision": identity.get("revision"),
        "backend": identity.get("backend"),
        "prompt_class": grader.prompt_class,
        "prompt_type": grader.prompt_type,
        "is_self_rated": grader.is_self_rated,
        "template_hash": grader.template_hash,
        "identity": identity,
        "identity_hash": grader.identity_hash,
        "options": grader.options,
    }
    try:
        prompt = get_prompt_class(grader.prompt_class)
    except UnknownPromptClass:
        return {**record, "template": None, "template_note": "no built-in prompt class of this name (imported grades)"}
    texts = {
        "question_part": prompt.question_part,
        "context_part": prompt.context_part,
        "template": prompt.template,
        "chat_system": prompt.chat_system,
        "chat_user": prompt.chat_user,
        "json_instruction": prompt.json_instruction,
        "json_field": prompt.json_field,
        "parser": prompt.parser,
        "letter_choices": prompt.letter_choices,
    }
    digest = prompt.template_hash()
    if digest != grader.template_hash:
        note = "this version's prompt class hashes otherwise: the texts the grades came from are not stored"
        return {**record, "template": None, "template_note": note, "current_template_sha256": digest}
    return {**record, "template": texts, "template_sha256": digest, "template_note": "matches template_hash"}


# ---- writing ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BundleSummary:
    path: Path
    size: int
    members: int
    rows: dict[str, int]


@contextmanager
def build_slot() -> Iterator[None]:
    """One bundle build at a time in this process (the web's download); TooMany while one runs."""
    if not _build_lock.acquire(blocking=False):
        raise TooMany("a bundle is being built; try again in a moment")
    try:
        yield
    finally:
        _build_lock.release()


def product_version() -> str:
    try:
        return package_metadata.version("rubric-workbench")
    except package_metadata.PackageNotFoundError:
        return "unknown"


def schema_revision(session: Session) -> str:
    """The database's Alembic revision."""
    return str(session.execute(text("SELECT version_num FROM alembic_version")).scalar_one())


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(MB):
            digest.update(chunk)
    return digest.hexdigest()


def write_bundle(session: Session, collection: Collection, settings: BoardSettings, out: Path) -> BundleSummary:
    """Write the bundle of ``collection`` and the leaderboard of ``settings`` to ``out`` (a .tar.gz).

    Members are staged in a temporary directory, so memory holds one row at a time, not the bundle.
    """
    resolve_grader(session, collection, grader_id=settings.request.grader_id)  # NotFound for another's grader
    board = leaderboard_text(session, collection, settings).encode()
    grader_ids = _grader_ids(session, collection)
    rows: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="rubric-bundle-") as tmp:
        staged = Path(tmp)
        (staged / "tables").mkdir()
        (staged / LEADERBOARD).write_bytes(board)
        graders = session.scalars(select(Grader).where(Grader.id.in_(grader_ids)).order_by(Grader.id))
        body = json.dumps([grader_record(g) for g in graders], indent=1, ensure_ascii=False) + "\n"
        (staged / GRADERS).write_text(body, encoding="utf-8")
        for table in bundle_tables():
            with (staged / "tables" / f"{table.name}.jsonl").open("wb") as handle:
                rows[table.name] = _dump_table(session, table, _selected_rows(table, collection, grader_ids), handle)
        names = member_names()
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "product_version": product_version(),
            "schema_revision": schema_revision(session),
            "created_at": datetime.now(UTC).isoformat(),
            "collection": collection.name,
            "collection_id": collection.id,
            "leaderboard": {
                "settings": settings.as_json(),
                "argv": leaderboard_argv(collection.name, settings),
                "command": shlex.join(leaderboard_argv(collection.name, settings)),
            },
            "rows": rows,
            "excluded_tables": EXCLUDED_TABLES,
            "members": [
                {"name": n, "sha256": _sha256_file(staged / n), "size": (staged / n).stat().st_size} for n in names
            ],
        }
        (staged / MANIFEST).write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        try:
            _write_archive(staged, [MANIFEST, *names], out)
        except OSError as error:  # a directory, no such folder, no permission, a full disk: the user's path
            raise Invalid(f"cannot write {str(out)[:200]!r}: {error.strerror or error}") from error
    return BundleSummary(out, out.stat().st_size, len(names) + 1, rows)


def _write_archive(staged: Path, names: list[str], out: Path) -> None:
    """The tar.gz written beside ``out`` and renamed onto it: ``out`` is never a half-written bundle."""
    handle, part_name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name[:100]}.", suffix=".part")
    part = Path(part_name)
    try:
        with open(handle, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
            for name in names:
                info = tar.gettarinfo(str(staged / name), arcname=name)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mode = 0o644
                with (staged / name).open("rb") as member:
                    tar.addfile(info, member)
        part.chmod(0o644)
        part.replace(out)
    finally:
        part.unlink(missing_ok=True)


# ---- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Manifest:
    collection: str
    collection_id: int
    schema_revision: str
    settings: BoardSettings
    argv: list[str]
    members: dict[str, tuple[str, int]]  # name → (sha256, size)
    raw: dict[str, Any] = field(repr=False)


class _BoundedTarInfo(tarfile.TarInfo):
    """A member header whose extended header (pax, GNU long name) may not exceed ``MAX_HEADER_BYTES``.

    tarfile reads an extended header into memory whole: without this bound a pax-header bomb would
    cost memory up to the decompression limit before it is refused.
    """

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in EXTENDED_HEADERS and self.size > MAX_HEADER_BYTES:
            raise TooLarge(f"the bundle holds an extended tar header of {self.size} bytes (at most {MAX_HEADER_BYTES})")
        return super()._proc_member(tarfile_)  # type: ignore[misc,no-any-return]


@contextmanager
def _members(path: Path) -> Iterator[Iterator[tuple[tarfile.TarInfo, IO[bytes]]]]:
    """The bundle's members in order, as streams, each checked for its kind, name and size; never extracted."""
    if not path.is_file():
        raise Invalid(f"{path}: no such bundle file")
    limit = get_settings().max_decompressed_mb * MB
    raw = path.open("rb")
    try:
        if raw.read(2) != b"\x1f\x8b":
            raise Invalid(f"{path}: not a gzip-compressed tar file")
        raw.seek(0)
        bounded = io.BufferedReader(_InflateLimit(gzip.GzipFile(fileobj=raw, mode="rb"), limit, str(path)))
        try:
            tar = tarfile.open(fileobj=bounded, mode="r|", tarinfo=_BoundedTarInfo)  # noqa: SIM115  closed with raw
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise Invalid(f"{path}: not a readable tar.gz ({exc})") from exc
        yield _checked_members(path, tar, limit)
    finally:
        raw.close()


def _checked_members(path: Path, tar: tarfile.TarFile, limit: int) -> Iterator[tuple[tarfile.TarInfo, IO[bytes]]]:
    seen: set[str] = set()
    count = 0
    while True:
        try:
            info = tar.next()
        except (tarfile.TarError, OSError, EOFError, gzip.BadGzipFile) as exc:
            raise Invalid(f"{path}: corrupt or truncated archive after {count} members ({exc})") from exc
        if info is None:
            return
        count += 1
        name = info.name
        if count > MAX_MEMBERS:
            raise Invalid(f"{path}: more than {MAX_MEMBERS} members")
        if name.startswith("/") or ".." in name.split("/") or "\\" in name:
            raise Invalid(f"{path}: member {name!r}: unsafe name (absolute or with '..')")
        if not info.isreg():
            raise Invalid(f"{path}: member {name!r}: not a regular file (a link or directory)")
        if name in seen:
            raise Invalid(f"{path}: member {name!r} appears twice")
        if info.size > limit:
            raise TooLarge(
                f"{path}: member {name!r} declares {info.size} bytes, over the limit (RUBRIC_MAX_DECOMPRESSED_MB)"
            )
        seen.add(name)
        handle = tar.extractfile(info)
        assert handle is not None  # a regular file always has one
        yield info, handle


def _read_manifest(path: Path, info: tarfile.TarInfo, handle: IO[bytes]) -> Manifest:
    if info.name != MANIFEST:
        raise Invalid(f"{path}: the first member must be {MANIFEST}, not {info.name!r}")
    if info.size > MAX_MANIFEST_BYTES:
        raise TooLarge(f"{path}: {MANIFEST} is over {MAX_MANIFEST_BYTES // MB} MB")
    try:
        raw = json.loads(handle.read().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ImportFormatError(MANIFEST, None, None, f"not JSON ({exc})") from exc
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise ImportFormatError(MANIFEST, None, "format", f"not a {FORMAT} manifest")
    if raw.get("format_version") != FORMAT_VERSION:
        raise ImportFormatError(MANIFEST, None, "format_version", f"this version reads format {FORMAT_VERSION} only")
    for key, kind in (("collection", str), ("collection_id", int), ("schema_revision", str), ("leaderboard", dict)):
        if not isinstance(raw.get(key), kind):
            raise ImportFormatError(MANIFEST, None, key, f"missing or not {kind.__name__}")
    board = raw["leaderboard"]
    argv = board.get("argv")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ImportFormatError(MANIFEST, None, "leaderboard.argv", "must be a list of strings")
    return Manifest(
        collection=raw["collection"],
        collection_id=raw["collection_id"],
        schema_revision=raw["schema_revision"],
        settings=settings_from_json(board.get("settings")),
        argv=argv,
        members=_member_list(raw.get("members")),
        raw=raw,
    )


def _member_list(raw: Any) -> dict[str, tuple[str, int]]:
    expected = member_names()
    if not isinstance(raw, list) or len(raw) != len(expected):
        raise ImportFormatError(MANIFEST, None, "members", f"must list the {len(expected)} members {expected}")
    members: dict[str, tuple[str, int]] = {}
    for i, (entry, name) in enumerate(zip(raw, expected, strict=True)):
        if not isinstance(entry, dict) or entry.get("name") != name:
            raise ImportFormatError(MANIFEST, None, f"members[{i}]", f"expected member {name!r}")
        digest, size = entry.get("sha256"), entry.get("size")
        if not isinstance(digest, str) or not isinstance(size, int) or isinstance(size, bool):
            raise ImportFormatError(MANIFEST, None, f"members[{i}]", "needs sha256 (text) and size (integer)")
        members[name] = (digest, size)
    return members


def _check_revision(manifest: Manifest, revision: str) -> None:
    if manifest.schema_revision != revision:
        raise Invalid(
            f"the bundle's schema revision {manifest.schema_revision!r} differs from this database's {revision!r}: "
            "import it with the product version that wrote it, or migrate a database of that version first"
        )


def check_bundle(path: Path, revision: str) -> tuple[Manifest, list[str]]:
    """Read the whole bundle once: its structure (Invalid/TooLarge when hostile) and each member's sha256.

    Returns the manifest and the members whose bytes differ from it (empty: every hash checks).
    """
    with _members(path) as members:
        first = next(members, None)
        if first is None:
            raise Invalid(f"{path}: an empty archive")
        manifest = _read_manifest(path, *first)
        _check_revision(manifest, revision)
        expected = iter(manifest.members)
        differing: list[str] = []
        for info, handle in members:
            wanted = next(expected, None)
            if info.name != wanted:
                raise Invalid(f"{path}: member {info.name!r} unexpected here (expected {wanted!r})")
            digest, size = manifest.members[info.name]
            if _sha256_stream(handle) != digest or info.size != size:
                differing.append(info.name)
        missing = next(expected, None)
        if missing is not None:
            raise Invalid(f"{path}: member {missing!r} is missing")
    return manifest, differing


def _sha256_stream(handle: IO[bytes]) -> str:
    digest = hashlib.sha256()
    while chunk := handle.read(MB):
        digest.update(chunk)
    return digest.hexdigest()


def read_leaderboard(path: Path) -> bytes:
    """``leaderboard.json``'s bytes (the bundle already checked)."""
    with _members(path) as members:
        for info, handle in members:
            if info.name == LEADERBOARD:
                return handle.read()
    raise Invalid(f"{path}: no {LEADERBOARD}")


# ---- importing -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ImportedBundle:
    collection: str
    rows: dict[str, int]
    argv: list[str]


def require_empty(session: Session) -> None:
    collections = session.scalar(select(Collection.name).limit(1))
    graders = session.scalar(select(Grader.id).limit(1))
    if collections is not None or graders is not None:
        held = f"collection {collections!r}" if collections is not None else "graders"
        raise Conflict(
            f"a bundle imports into an empty database only (its ids are kept), and this one holds {held}: "
            "point RUBRIC_DATABASE_URL at a new database and run `rubric db upgrade` first"
        )


def import_bundle(session: Session, path: Path) -> ImportedBundle:
    """Import the bundle into an empty database of the same schema revision, keeping its primary keys.

    The caller's transaction holds every row: any error (a bad hash, a malformed row, a broken
    reference) leaves the database as it was. Existing grade-cache entries are kept; absent ones added.
    """
    require_empty(session)
    manifest, differing = check_bundle(path, schema_revision(session))
    if differing:
        raise BundleMismatch(f"{path}: member {differing[0]!r} differs from its sha256 in the manifest")
    rows: dict[str, int] = {}
    tables = {f"tables/{t.name}.jsonl": t for t in bundle_tables()}
    with _members(path) as members:
        for info, handle in members:
            table = tables.get(info.name)
            if table is not None:
                rows[table.name] = _load_table(session, table, info.name, handle, manifest)
    _check_collection(session, manifest)
    if session.get_bind().dialect.name == "postgresql":
        _advance_sequences(session)
    return ImportedBundle(manifest.collection, rows, manifest.argv)


def _check_collection(session: Session, manifest: Manifest) -> None:
    names = list(session.scalars(select(Collection.name)))
    if names != [manifest.collection]:
        message = f"must hold the one collection {manifest.collection!r}"
        raise ImportFormatError("tables/collection.jsonl", None, "name", message)


def _load_table(session: Session, table: Table, member: str, handle: IO[bytes], manifest: Manifest) -> int:
    batch: list[dict[str, Any]] = []
    count = 0
    columns = {c.name: c for c in table.columns}
    for line_no, raw in enumerate(handle, start=1):
        if not raw.strip():
            continue
        row = _decode_row(member, line_no, raw, columns)
        if "collection_id" in row and row["collection_id"] != manifest.collection_id:
            raise ImportFormatError(member, line_no, "collection_id", f"must be the bundle's {manifest.collection_id}")
        if table.name == "collection" and (row["id"] != manifest.collection_id or row["name"] != manifest.collection):
            raise ImportFormatError(member, line_no, "name", "must be the manifest's collection")
        batch.append(row)
        count += 1
        if len(batch) >= INSERT_BATCH:
            _insert(session, table, member, batch)
            batch = []
    if batch:
        _insert(session, table, member, batch)
    return count


def _insert(session: Session, table: Table, member: str, rows: list[dict[str, Any]]) -> None:
    if table.name == "grade_cache":  # shared: an entry the target already holds is the same content by its key
        present = set(session.scalars(select(table.c.key).where(table.c.key.in_([r["key"] for r in rows]))))
        rows = [r for r in rows if r["key"] not in present]
        if not rows:
            return
    try:
        session.execute(insert(table), rows)
    except IntegrityError as exc:
        detail = str(exc.orig).strip().splitlines()[0][:300]
        raise ImportFormatError(member, None, None, f"rows break a key or a reference ({detail})") from exc


def _decode_row(member: str, line_no: int, raw: bytes, columns: dict[str, Any]) -> dict[str, Any]:
    try:
        record = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: brackets nested past the stack
        raise ImportFormatError(member, line_no, None, f"not a JSON line ({str(exc)[:200]})") from None
    if not isinstance(record, dict):
        raise ImportFormatError(member, line_no, None, "must be a JSON object")
    unknown = sorted(set(record) - set(columns))
    if unknown:
        raise ImportFormatError(member, line_no, unknown[0], "unknown column")
    missing = sorted(set(columns) - set(record))
    if missing:
        raise ImportFormatError(member, line_no, missing[0], "missing column")
    return {name: _decode_value(member, line_no, column, record[name]) for name, column in columns.items()}


def _decode_value(member: str, line_no: int, column: Any, value: Any) -> Any:
    def bad(message: str) -> ImportFormatError:
        return ImportFormatError(member, line_no, column.name, message)

    kind = column.type
    if value is None:
        if not column.nullable:
            raise bad("must not be null")
        return None
    if isinstance(kind, JSON):
        return value
    if isinstance(kind, Boolean):
        if not isinstance(value, bool):
            raise bad("must be true or false")
        return value
    if isinstance(kind, Integer):
        if not isinstance(value, int) or isinstance(value, bool) or abs(value) >= 2**63:
            raise bad("must be an integer")
        return value
    if isinstance(kind, Float):
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
            raise bad("must be a finite number")  # json reads NaN and Infinity, which no importer lets in
        return float(value)
    if isinstance(kind, DateTime):
        try:
            moment = datetime.fromisoformat(value) if isinstance(value, str) and len(value) <= 40 else None
        except ValueError:
            moment = None
        if moment is None or moment.tzinfo is None:
            raise bad("must be an ISO-8601 time with its offset")
        return moment.astimezone(UTC)
    if isinstance(kind, String):
        if not isinstance(value, str):
            raise bad("must be text")
        if "\x00" in value:
            raise bad("contains a NUL character")  # PostgreSQL text cannot hold NUL; SQLite's must not either
        if kind.length is not None and len(value) > kind.length:
            raise bad(f"is longer than {kind.length} characters")
        return value
    raise bad(f"a column of type {kind} that bundles cannot carry")


def _advance_sequences(session: Session) -> None:
    """Rows came with their ids: move each id sequence past them, so the next insert does not collide."""
    for table in bundle_tables():
        pk = list(table.primary_key.columns)
        if len(pk) != 1 or pk[0].name != "id":
            continue
        quoted = f'"{table.name}"'
        session.execute(
            text(f"SELECT setval(pg_get_serial_sequence(:table, 'id'), COALESCE(MAX(id), 0) + 1, false) FROM {quoted}"),
            {"table": quoted},
        )


# ---- verifying -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verification:
    """The outcome of ``verify_bundle``: ``problems`` empty when every hash and the leaderboard check."""

    collection: str
    members: int
    problems: list[str]
    command: str

    @property
    def ok(self) -> bool:
        return not self.problems


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    from app.migrate import alembic_config

    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    return str(head)


def verify_bundle(path: Path) -> Verification:
    """Check every member's sha256, then import into a fresh SQLite database and recompute the board.

    Raises Invalid/TooLarge for an unreadable or hostile bundle; a differing member or board is a problem.
    """
    from app.db import make_engine, session_scope
    from app.migrate import upgrade

    manifest, differing = check_bundle(path, head_revision())
    problems = [f"member {name!r}: sha256 differs from the manifest" for name in differing]
    argv = leaderboard_argv(manifest.collection, manifest.settings)
    if manifest.argv != argv:
        problems.append(f"manifest: leaderboard.argv is not its settings' command ({shlex.join(argv)})")
    if problems:
        return Verification(manifest.collection, len(manifest.members) + 1, problems, shlex.join(manifest.argv))
    with tempfile.TemporaryDirectory(prefix="rubric-verify-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'verify.sqlite'}"
        upgrade(url)
        engine = make_engine(url)
        try:
            with session_scope(engine) as session:
                import_bundle(session, path)
            with session_scope(engine) as session:
                collection = session.scalars(select(Collection)).one()
                computed = leaderboard_text(session, collection, manifest.settings).encode()
        finally:
            engine.dispose()
    stored = read_leaderboard(path)
    if computed != stored:
        problems.append(f"{LEADERBOARD}: {first_difference(stored, computed)}")
    return Verification(manifest.collection, len(manifest.members) + 1, problems, shlex.join(manifest.argv))


def first_difference(stored: bytes, computed: bytes) -> str:
    """Where two texts first differ, by line: what the bundle holds and what was recomputed."""
    old, new = stored.decode("utf-8", "replace").splitlines(), computed.decode("utf-8", "replace").splitlines()
    for i, (a, b) in enumerate(zip(old, new, strict=False), start=1):
        if a != b:
            return f"line {i} differs: bundle {a[:120]!r}, recomputed {b[:120]!r}"
    return f"the bundle has {len(old)} lines, the recomputed board {len(new)}"
