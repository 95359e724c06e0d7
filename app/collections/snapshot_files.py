"""Persisted evaluation snapshots: the cold path reads a compact file instead of the database.

One ``.snapshot`` file per collection structure and one per grader store, named by the collection
id and its structure token, in a directory per database identity (docs/snapshots.md):

    <cache dir>/<database location hash>/c<collection>-<token>.snapshot             pool, systems, rankings
    <cache dir>/<database location hash>/c<collection>-<token>-g<grader>.snapshot   one grader's cells at revision R_f

A file is consecutive ``.npy`` records (numpy's own format, written by ``np.save``): first the
JSON meta as uint8 bytes, naming the arrays in order, then one record per array. It is read by
memory-mapping it and taking ``np.frombuffer`` views, so loading copies nothing (see ``read``).

Why reading one is exact: a structure token names one state of the pool, systems and rankings
(every structural write and every grade deletion replaces it), and a grade file holds every grade
row of its grader written at a revision ≤ R_f (perhaps newer ones too, which later rows overwrite);
applying the rows above R_f, as the live snapshot does, gives what a database read gives
(app/collections/revision.py). A file whose R_f is above the database's revision is from another
history and is dropped. Anything unreadable, truncated, of another format or another key is
ignored and replaced: a cache file is never an error for the user.

A directory per database location (URL, or SQLite file path) bounds the disk: a database
recreated there overwrites its predecessor's files. Every file records the database *identity*,
which changes when the database at that location is another one: PostgreSQL's database oid (new on
every CREATE DATABASE) and the server's start time; SQLite's device and inode. A file of another
identity is not read. What it cannot see: a SQLite file restored *in place* (same inode) from an
older backup that then diverges. After restoring a backup in place, run ``rubric db clear-snapshots``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import mmap
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from numpy.lib import format as npy
from sqlalchemy import text
from sqlalchemy.orm import Session

from app.config import get_settings

FORMAT = 2
SUFFIX = ".snapshot"
_LEGACY_SUFFIX = ".npz"  # FORMAT 1 (a numpy zip): never read, deleted wherever files are cleaned
_SAFE_TOKEN = re.compile(r"[0-9A-Za-z_-]{1,64}")
log = logging.getLogger(__name__)

Arrays = dict[str, np.ndarray[Any, Any]]


def cache_dir() -> Path | None:
    """Where files go, or None when persisted snapshots are switched off (``RUBRIC_SNAPSHOT_FILES=false``)."""
    settings = get_settings()
    return settings.snapshot_cache_dir if settings.snapshot_files else None


class Database(NamedTuple):
    """Where a database is (its files' directory) and which database it is (checked in every file)."""

    location: str
    identity: str


def database_identity(session: Session) -> Database | None:
    """The session's database: location and an identity that changes whenever it is another database.

    None: keep no files (in-memory SQLite, other dialects).
    """
    url = session.get_bind().engine.url
    if url.get_backend_name() == "sqlite":
        if not url.database or url.database == ":memory:" or url.database.startswith("file:"):
            return None
        path = os.path.realpath(url.database)
        try:
            stat = os.stat(path)
        except OSError:
            return None
        return Database(f"sqlite|{path}", f"sqlite|{path}|{stat.st_dev}|{stat.st_ino}")
    if url.get_backend_name() == "postgresql":
        oid, started = session.execute(
            text("SELECT oid, pg_postmaster_start_time() FROM pg_database WHERE datname = current_database()")
        ).one()
        location = f"postgresql|{url.host}|{url.port}|{url.database}"
        return Database(location, f"{location}|{oid}|{started.isoformat()}")
    return None


def structure_path(database: Database, collection_id: int, token: str) -> Path | None:
    root = cache_dir()
    if root is None or not _SAFE_TOKEN.fullmatch(token):
        return None
    directory = root / hashlib.sha256(database.location.encode()).hexdigest()[:24]
    return directory / f"c{collection_id}-{token}{SUFFIX}"


def grades_path(database: Database, collection_id: int, token: str, grader_pk: int) -> Path | None:
    base = structure_path(database, collection_id, token)
    return None if base is None else base.with_name(f"{base.stem}-g{grader_pk}{SUFFIX}")


# ---- strings as two arrays (utf-8 bytes and end offsets): no pickling, any character ----------


def pack_strings(values: Sequence[str]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    encoded = [value.encode() for value in values]
    ends = np.cumsum([len(b) for b in encoded], dtype=np.int64) if encoded else np.zeros(0, np.int64)
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), ends


def unpack_strings(blob: np.ndarray[Any, Any], ends: np.ndarray[Any, Any]) -> tuple[str, ...]:
    data = blob.tobytes()
    starts = [0, *ends[:-1].tolist()] if len(ends) else []
    spans = zip(starts, ends.tolist(), strict=True)
    text = data.decode()
    if len(text) == len(data):
        # ASCII (nearly always: ids), where byte offsets are character offsets: one decode, then str
        # slices, half the time of decoding 200k small byte strings on a cold leaderboard.
        return tuple(text[s:e] for s, e in spans)
    return tuple(data[s:e].decode() for s, e in spans)


# ---- writing and reading -----------------------------------------------------------------------


def write(path: Path, meta: Mapping[str, Any], arrays: Arrays) -> None:
    """Write atomically (a temporary file in the same directory, then ``os.replace``); failures only log.

    The file: the meta (plus ``"arrays"``, the names in order) as a uint8 ``.npy`` record of JSON,
    then one C-order ``.npy`` record per array. Two processes writing one key write equal contents,
    so whichever replace lands last is right. Files of the collection's other structure tokens (and
    of the old format) are deleted, so the disk holds one per collection.
    """
    header = json.dumps(dict(meta) | {"arrays": list(arrays)}).encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(descriptor, "wb") as handle:
                np.save(handle, np.frombuffer(header, np.uint8), allow_pickle=False)
                for array in arrays.values():
                    np.save(handle, np.ascontiguousarray(array), allow_pickle=False)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        _delete_other_tokens(path, str(meta["token"]))
    except OSError as error:
        log.warning("snapshot file %s not written: %s", path, error)


def _delete_other_tokens(path: Path, token: str) -> None:
    collection_prefix = path.name.split("-", 1)[0] + "-"  # "c12-"
    for other in path.parent.glob(f"{collection_prefix}*{SUFFIX}"):
        if not other.name.startswith(f"{collection_prefix}{token}"):
            discard(other)
    for legacy in path.parent.glob(f"{collection_prefix}*{_LEGACY_SUFFIX}"):
        discard(legacy)


def read(path: Path, expected: Mapping[str, Any], names: Sequence[str]) -> tuple[dict[str, Any], Arrays] | None:
    """The file's meta and arrays if it is whole, of this format and of these keys; else None (and it is removed).

    The arrays are views into a private (``ACCESS_COPY``) memory map of the file, which they keep
    alive: nothing is copied on load, and pages are read as they are touched. This is safe because
    writers only ever ``os.replace`` whole files: a mapped file is never truncated or rewritten
    under a reader (a replaced or deleted file stays readable through its mapping until the last
    view goes). Copy-on-write makes the arrays writable (a grade store upserts cells in place)
    without ever changing the file.
    """
    if not path.is_file():
        return None
    try:
        meta, arrays = _map(path)
        if any(meta.get(key) != value for key, value in expected.items()):
            raise ValueError("another format or key")
        return meta, {name: arrays[name] for name in names}
    except (OSError, ValueError, KeyError, UnicodeDecodeError) as error:
        log.info("snapshot file %s ignored: %s", path, error)
        discard(path)
        return None


def _map(path: Path) -> tuple[dict[str, Any], Arrays]:
    """Meta and named arrays of a whole file: every record inside it, nothing after the last one."""
    with path.open("rb") as handle:  # the mapping holds its own reference to the file
        mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)  # ValueError when empty
    meta = json.loads(_record(mapping).tobytes())
    if not isinstance(meta, dict):
        raise ValueError("meta is not an object")
    names = meta.get("arrays")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
        raise ValueError("meta does not list the arrays")
    arrays = {name: _record(mapping) for name in names}
    if mapping.tell() != len(mapping):
        raise ValueError("bytes after the last array")
    return meta, arrays


def _record(mapping: mmap.mmap) -> np.ndarray[Any, Any]:
    """The ``.npy`` record at the mapping's position, as a view into it; the position moves past it.

    Only the header is parsed (numpy's public readers); the data is never unpickled: an object
    dtype, Fortran order, a header of another version or data past the end of the file is refused.
    """
    version = npy.read_magic(mapping)
    if version == (1, 0):
        shape, fortran_order, dtype = npy.read_array_header_1_0(mapping)
    elif version == (2, 0):
        shape, fortran_order, dtype = npy.read_array_header_2_0(mapping)
    else:
        raise ValueError(f"npy format version {version}")
    if dtype.hasobject or fortran_order or any(size < 0 for size in shape):
        raise ValueError(f"an array of dtype {dtype}, shape {shape}, fortran order {fortran_order}")
    count, offset = math.prod(shape), mapping.tell()
    end = offset + count * dtype.itemsize
    if end > len(mapping):
        raise ValueError("an array runs past the end of the file")
    mapping.seek(end)
    return np.frombuffer(mapping, dtype, count, offset).reshape(shape)


def discard(path: Path) -> None:
    """Remove a file that must not be read again; one that cannot be removed is only logged (it is replaced later)."""
    try:
        path.unlink(missing_ok=True)
    except OSError as error:
        log.warning("snapshot file %s not removed: %s", path, error)


def clear_files() -> int:
    """Delete every persisted snapshot, of either format (e.g. after restoring a backup in place); returns how many."""
    root = cache_dir() or get_settings().snapshot_cache_dir
    removed = 0
    if root.is_dir():
        for suffix in (SUFFIX, _LEGACY_SUFFIX):
            for path in root.glob(f"*/*{suffix}"):
                discard(path)
                removed += 1
    return removed
