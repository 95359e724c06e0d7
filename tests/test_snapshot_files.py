"""The compact snapshot and its persisted copy (issue 16): exact against a database rebuild, never trusted blindly.

Every board read from a persisted file is compared with the same board rebuilt from the database
(files off), after an import, grading batches and a rubric edit, for two graders.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.lib import format as npy
from sqlalchemy import create_engine, select, text

from app.collections import snapshot, snapshot_files
from app.collections.revision import upsert_grades
from app.collections.service import (
    CollectionWriter,
    ensure_collection,
    get_collection,
    import_interchange,
    import_run,
)
from app.config import get_settings
from app.evaluation.frame import PoolIndex, RankingFrame
from app.leaderboards import service as leaderboards
from app.leaderboards.service import LeaderboardRequest, compute_leaderboard, leaderboard_json
from app.models import Grade
from app.rubrics.editing import ItemChange, apply_edit
from app.rubrics.service import ItemSpec, create_version, latest_version, store_items
from tests.conftest import SNAPSHOT_DIR, Database, PostgresServer

QUERIES, PASSAGES, ITEMS, SYSTEMS = ("q1", "q2", "q3"), 6, ("a", "b", "c"), ("s1", "s2", "s3")
GRADERS = ("llm-a", "llm-b")


def _grades(rng: random.Random, query: str) -> list[dict[str, Any]]:
    result = []
    for llm in GRADERS:
        ratings = {f"{query}/{i}": rng.randint(0, 5) for i in ITEMS}
        result.append(
            {
                "correctAnswered": [i for i, r in ratings.items() if r > 0],
                "wrongAnswered": [i for i, r in ratings.items() if r == 0],
                "answers": [[i, str(r)] for i, r in ratings.items()],
                "llm": llm,
                "llm_options": {},
                "exam_ratio": 0.0,
                "prompt_info": {"prompt_class": "QuestionSelfRatedUnanswerablePromptWithChoices"},
                "self_ratings": [{"question_id": i, "self_rating": r} for i, r in ratings.items()],
            }
        )
    return result


def _collection_file(path: Path, seed: int = 7) -> Path:
    rng = random.Random(seed)
    rows = []
    for query in QUERIES:
        paragraphs = []
        for p in range(PASSAGES):
            pid = f"{query}-p{p}"
            ranks = {s: r for s in SYSTEMS if (r := rng.randint(1, PASSAGES + 2)) <= PASSAGES}
            rankings = [
                {"method": s, "paragraphId": pid, "queryId": query, "rank": r, "score": 10.0 - r + rng.random() / 10}
                for s, r in ranks.items()
            ]
            paragraphs.append(
                {
                    "paragraph_id": pid,
                    "text": f"text of {pid}",
                    "paragraph_data": {"judgments": [], "rankings": rankings},
                    "exam_grades": _grades(rng, query),
                }
            )
        rows.append([query, paragraphs])
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture
def collection(database: Database, tmp_path: Path) -> Database:
    with database.session() as session:
        import_interchange(session, ensure_collection(session, "c"), _collection_file(tmp_path / "c.jsonl"))
        session.commit()
    return database


def _boards(database: Database, monkeypatch: pytest.MonkeyPatch, *, files: bool, **options: Any) -> list[Any]:
    """Every grader's boards (Cover, P@2) from a cold snapshot: from the files, or from the database only."""
    monkeypatch.setenv("RUBRIC_SNAPSHOT_FILES", "true" if files else "false")
    get_settings.cache_clear()
    snapshot.clear()
    leaderboards.clear()
    boards = []
    with database.session() as session:
        collection = get_collection(session, "c")
        for grader in snapshot.current(session, collection).grader_list():
            for measure in ("cover", "P@2"):
                request = LeaderboardRequest(
                    measure=measure, min_rating=3, top_k=2, bootstrap_samples=0, grader_id=grader.id, **options
                )
                boards.append(leaderboard_json(compute_leaderboard(session, collection, request)))
        session.commit()
    return boards


def _files() -> list[Path]:
    return sorted(SNAPSHOT_DIR.glob(f"*/*{snapshot_files.SUFFIX}"))


def _assert_files_equal_rebuild(database: Database, monkeypatch: pytest.MonkeyPatch, **options: Any) -> None:
    rebuilt = _boards(database, monkeypatch, files=False, **options)
    assert _boards(database, monkeypatch, files=True, **options) == rebuilt  # may write the files
    assert _boards(database, monkeypatch, files=True, **options) == rebuilt  # reads them


def _regrade(database: Database, seed: int, share: float = 0.5) -> None:
    rng = random.Random(seed)
    with database.session() as session:
        cells = session.execute(select(Grade.grader_pk, Grade.pool_entry_pk, Grade.item_id)).all()
        rows = [
            {"grader_pk": g, "pool_entry_pk": e, "item_id": i, "self_rating": rng.randint(0, 5)}
            for g, e, i in cells
            if rng.random() < share
        ]
        upsert_grades(session, rows, update=["self_rating"])
        session.commit()


def test_persisted_boards_equal_a_database_rebuild_through_writes(
    collection: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshot.clear_files()
    _assert_files_equal_rebuild(collection, monkeypatch)
    written = _files()
    assert len(written) == 3  # the structure and two graders' stores
    _regrade(collection, seed=1)  # rows above the files' revision are applied on top of them
    _regrade(collection, seed=2, share=0.2)
    _assert_files_equal_rebuild(collection, monkeypatch)
    assert _files() == written  # same structure token: the files stay
    with collection.session() as session:  # a structural write: a new token, new files, the old ones deleted
        run = tmp_path / "late.run"
        run.write_text("q1 Q0 q1-p0 1 9.0 late\nq2 Q0 q2-p5 1 9.0 late\n")
        import_run(session, get_collection(session, "c"), run)
        session.commit()
    _assert_files_equal_rebuild(collection, monkeypatch)
    assert len(_files()) == 3 and not set(_files()) & set(written)
    with collection.session() as session:  # a rubric edit: version 2 drops an item
        target = get_collection(session, "c")
        writer = CollectionWriter(session, target)
        specs = [
            ItemSpec(q, f"{q}/{i}", "question", f"item {i} of {q}", None, None, None) for q in QUERIES for i in ITEMS
        ]
        create_version(session, target, store_items(session, target, writer, specs), created_by="import", note="")
        apply_edit(session, target, [ItemChange("delete", "q2", "q2/b", expected_text="item b of q2")], user="ann")
        session.commit()
        version = latest_version(session, target)
        assert version is not None and version.number == 2
    _assert_files_equal_rebuild(collection, monkeypatch, rubric_version=2)


def test_unusable_files_are_ignored_and_replaced(collection: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot.clear_files()
    expected = _boards(collection, monkeypatch, files=False)
    _boards(collection, monkeypatch, files=True)
    stores = [path for path in _files() if "-g" in path.stem]
    (structure,) = set(_files()) - set(stores)
    _replace_bytes(structure, structure.read_bytes()[:1000])  # truncated
    _replace_bytes(stores[0], b"not a snapshot at all")  # corrupt
    # a file from a future revision (another history of this database): its contents must not count
    meta, arrays = _read_any(stores[1])
    arrays["rating"] = np.full_like(arrays["rating"], 5)
    snapshot_files.write(stores[1], {**meta, "revision": meta["revision"] + 5}, arrays)
    assert _boards(collection, monkeypatch, files=True) == expected
    assert _files() == sorted([structure, *stores])  # each replaced by a good one
    assert all(_read_any(path)[0]["format"] == snapshot_files.FORMAT for path in _files())
    # a file of another database (same name, another identity) is not read either
    meta, arrays = _read_any(stores[0])
    arrays["rating"] = np.full_like(arrays["rating"], 5)
    snapshot_files.write(stores[0], {**meta, "identity": "elsewhere"}, arrays)
    assert _boards(collection, monkeypatch, files=True) == expected


def _read_any(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Meta and every array of a whole file of this format, whatever its key."""
    found = snapshot_files.read(path, {}, [])
    assert found is not None
    found = snapshot_files.read(path, {}, found[0]["arrays"])
    assert found is not None
    return found


def _replace_bytes(path: Path, data: bytes) -> None:
    """Put other bytes at path the way writers do (a new file, then os.replace), never truncating a mapped file."""
    temporary = path.with_name(f".{path.name}.test")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def test_a_database_recreated_at_the_same_url_has_another_identity(
    collection: Database, postgres_server: PostgresServer | None
) -> None:
    with collection.session() as session:
        before = snapshot_files.database_identity(session)
    collection.engine.dispose()
    if collection.url.startswith("sqlite"):
        path = collection.url.removeprefix("sqlite:///")
        shutil.copy(path, path + ".copy")
        os.replace(path + ".copy", path)  # the same contents and URL, another file
    else:
        assert postgres_server is not None
        name = collection.url.rsplit("/", 1)[1]
        admin = create_engine(f"{postgres_server.url_base}/postgres", isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE {name}_copy TEMPLATE {name}"))
            conn.execute(text(f"DROP DATABASE {name} WITH (FORCE)"))
            conn.execute(text(f"ALTER DATABASE {name}_copy RENAME TO {name}"))
        admin.dispose()
    with collection.session() as session:
        after = snapshot_files.database_identity(session)
    assert before is not None and after is not None
    assert before.location == after.location and before.identity != after.identity


def _snapshot(collection_id: int, entries: int) -> snapshot.CollectionSnapshot:
    index = PoolIndex(("q",), np.zeros(entries, np.int64), tuple(f"p{e}" for e in range(entries)))
    rows = np.arange(entries, dtype=np.int32)
    rankings = RankingFrame(index, ("s",), np.zeros(entries, np.int32), rows, rows, np.zeros(entries))
    structure = snapshot.Structure("t", collection_id, index, np.arange(entries, dtype=np.int64), rankings)
    return snapshot.CollectionSnapshot(collection_id, structure, 0, [])


def test_the_lru_evicts_by_bytes_and_keeps_the_most_recent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUBRIC_SNAPSHOT_MEMORY_MB", "1")
    get_settings.cache_clear()
    snapshot.clear()
    small = [_snapshot(c, 4_000) for c in range(3)]  # ~0.44 MB each: two fit in 1 MB, three do not
    assert all(400_000 < s.nbytes() < 500_000 for s in small)
    for s in small:
        snapshot._snapshots[("url", s.collection_id)] = s
        snapshot._evict()
    assert list(snapshot._snapshots) == [("url", 1), ("url", 2)]  # the oldest went first
    big = _snapshot(9, 20_000)  # alone over the budget: kept, being the one in use
    snapshot._snapshots[("url", 9)] = big
    snapshot._evict()
    assert list(snapshot._snapshots) == [("url", 9)]
    snapshot.clear()


def test_grade_store_upserts_match_a_dict_of_cells() -> None:
    from app.collections.queries import GraderRef

    rng = random.Random(3)
    store = snapshot.GradeStore(GraderRef(1, "m", "p", "t", "h", True))
    oracle: dict[tuple[int, str], tuple[int, bool]] = {}
    for _ in range(5):
        cells = [(rng.randint(0, 50), f"i{rng.randint(0, 9)}", rng.choice([None, 0, 3, 5, 300])) for _ in range(80)]
        store.apply(
            ([e for e, _, _ in cells], [i for _, i, _ in cells], [r for *_, r in cells], [r for *_, r in cells])
        )
        for e, i, r in cells:  # later rows of one batch win, as in a database
            oracle[(e, i)] = (-1 if r is None else r, bool(r))
    frame = store.frame(PoolIndex(("q",), np.zeros(51, np.int64), tuple(map(str, range(51)))))
    assert frame.entry.dtype == frame.item.dtype == frame.rating.dtype == np.int64
    cells = {
        (e, frame.items[i]): (r, c)
        for e, i, r, c in zip(
            frame.entry.tolist(), frame.item.tolist(), frame.rating.tolist(), frame.correct.tolist(), strict=True
        )
    }
    assert cells == oracle  # a rating of 300 widened the int8 column instead of wrapping


def test_db_clear_snapshots_deletes_every_file_and_the_next_board_rebuilds(
    collection: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from app.cli import app

    expected = _boards(collection, monkeypatch, files=True)
    written = len(_files())
    assert written >= 2  # the structure and at least one grader
    result = CliRunner().invoke(app, ["db", "clear-snapshots"])
    assert result.exit_code == 0, result.output
    assert f"removed {written} snapshot files" in result.output
    assert _files() == []
    assert _boards(collection, monkeypatch, files=True) == expected


@pytest.mark.parametrize(
    "strings",
    [(), ("",), ("p1", "", "q-2", "sysA"), ("café", "p1", "東京", "", "x")],
    ids=["none", "empty", "ascii", "non-ascii"],
)
def test_strings_come_back_as_they_were_packed(strings: tuple[str, ...]) -> None:
    assert snapshot_files.unpack_strings(*snapshot_files.pack_strings(strings)) == strings


# ---- the file format: damaged files are refused (and removed), never unpickled --------------------

_UNPICKLED: list[str] = []


def _trip() -> str:
    _UNPICKLED.append("unpickled")
    return "tripped"


class _Tripwire:
    """Unpickling it calls ``_trip``: a reader that unpickles leaves a trace."""

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return _trip, ()


def _npy(array: np.ndarray[Any, Any], **header: Any) -> bytes:
    """One ``.npy`` record of the array's bytes; ``header`` overrides fields of its header (fortran_order, shape)."""
    buffer = io.BytesIO()
    npy.write_array_header_1_0(buffer, npy.header_data_from_array_1_0(array) | header)
    return buffer.getvalue() + array.tobytes()


def _pickled(array: np.ndarray[Any, Any]) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def _json(value: Any) -> bytes:
    return _npy(np.frombuffer(json.dumps(value).encode(), np.uint8))


def _layout(meta: dict[str, Any], records: list[bytes]) -> bytes:
    return _json(meta) + b"".join(records)


def _good(meta: dict[str, Any], arrays: dict[str, Any]) -> bytes:
    return _layout(meta, [_npy(a) for a in arrays.values()])


def _first_replaced(meta: dict[str, Any], arrays: dict[str, Any], first: bytes) -> bytes:
    return _layout(meta, [first, *(_npy(a) for a in list(arrays.values())[1:])])


Damage = Any  # (meta, arrays of a good file) -> the bytes of a damaged one
DAMAGES: dict[str, Damage] = {
    "empty": lambda m, a: b"",
    "not a snapshot": lambda m, a: b"not a snapshot at all",
    "truncated": lambda m, a: _good(m, a)[: len(_good(m, a)) // 2],
    "last array short by a byte": lambda m, a: _good(m, a)[:-1],
    "trailing bytes": lambda m, a: _good(m, a) + b"\0" * 8,
    "a record too many": lambda m, a: _good(m, a) + _npy(np.zeros(3)),
    "object dtype": lambda m, a: _first_replaced(m, a, _pickled(np.array([_Tripwire()], dtype=object))),
    "fortran order": lambda m, a: _first_replaced(m, a, _npy(np.zeros((2, 2)), fortran_order=True)),
    "negative shape": lambda m, a: _first_replaced(m, a, _npy(np.zeros(0), shape=(-1,))),
    "format 1 meta": lambda m, a: _good(m | {"format": 1}, a),
    "another token": lambda m, a: _good(m | {"token": "another"}, a),
    "meta not json": lambda m, a: _npy(np.frombuffer(b"{not json", np.uint8)) + _good(m, a)[len(_json(m)) :],
    "meta not an object": lambda m, a: _json([m]) + _good(m, a)[len(_json(m)) :],
    "an array missing": lambda m, a: _good(m | {"arrays": list(a)[1:]}, dict(list(a.items())[1:])),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_read_refuses_a_damaged_file_and_removes_it(damage: str, tmp_path: Path) -> None:
    path = tmp_path / f"c1-t{snapshot_files.SUFFIX}"
    meta = {"format": snapshot_files.FORMAT, "token": "t"}
    arrays = {"keys": np.arange(6, dtype=np.int64), "rating": np.arange(6, dtype=np.int8).reshape(2, 3)}
    snapshot_files.write(path, meta, arrays)
    assert path.read_bytes() == _good(meta | {"arrays": list(arrays)}, arrays)  # the layout the damages start from
    assert snapshot_files.read(path, meta, list(arrays)) is not None
    _replace_bytes(path, DAMAGES[damage](meta | {"arrays": list(arrays)}, arrays))
    _UNPICKLED.clear()
    assert snapshot_files.read(path, meta, list(arrays)) is None
    assert not path.exists() and not _UNPICKLED


@pytest.mark.parametrize("damage", ["truncated", "trailing bytes", "object dtype", "fortran order", "format 1 meta"])
def test_damaged_files_are_ignored_and_replaced(
    damage: str, collection: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshot.clear_files()
    expected = _boards(collection, monkeypatch, files=False)
    _boards(collection, monkeypatch, files=True)
    written = _files()
    damaged = {}
    for path in written:
        damaged[path] = DAMAGES[damage](*_read_any(path))
        _replace_bytes(path, damaged[path])
    _UNPICKLED.clear()
    assert _boards(collection, monkeypatch, files=True) == expected
    assert _files() == written and not _UNPICKLED
    for path in written:  # each rewritten whole, of this format
        assert path.read_bytes() != damaged[path]
        assert _read_any(path)[0]["format"] == snapshot_files.FORMAT
    assert _boards(collection, monkeypatch, files=True) == expected


def test_files_of_the_old_npz_format_are_removed(collection: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot.clear_files()
    expected = _boards(collection, monkeypatch, files=True)
    current = _files()
    legacy = [path.with_suffix(".npz") for path in current]
    for path in current:  # as FORMAT 1 left them: the same names, .npz
        np.savez(path.with_suffix(".npz"), meta=np.frombuffer(b'{"format": 1}', np.uint8))
        path.unlink()
    assert _boards(collection, monkeypatch, files=True) == expected  # rebuilt, written, and the .npz deleted
    assert _files() == current and not any(path.exists() for path in legacy)
    for path in legacy:  # and `rubric db clear-snapshots` deletes any left
        np.savez(path, meta=np.frombuffer(b'{"format": 1}', np.uint8))
    assert snapshot.clear_files() == len(current) + len(legacy)
    assert not any(SNAPSHOT_DIR.glob("*/*"))


def test_arrays_read_are_writable_and_writing_them_leaves_the_file_alone(tmp_path: Path) -> None:
    path = tmp_path / f"c1-t{snapshot_files.SUFFIX}"
    meta = {"format": snapshot_files.FORMAT, "token": "t"}
    arrays: snapshot_files.Arrays = {
        "keys": np.arange(5_000, dtype=np.int64),
        "matrix": np.arange(12.0).reshape(3, 4),
        "flags": np.array([True, False]),
        "none": np.zeros(0, np.int8),
    }
    snapshot_files.write(path, meta, arrays)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    found = snapshot_files.read(path, meta, list(arrays))
    assert found is not None
    read_meta, read = found
    assert read_meta == meta | {"arrays": list(arrays)}
    for name, array in arrays.items():
        assert read[name].dtype == array.dtype and np.array_equal(read[name], array)
        assert read[name].flags.writeable and read[name].flags.c_contiguous
    read["keys"][:] = -1
    read["matrix"] *= 2
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    again = snapshot_files.read(path, meta, ["keys", "matrix"])
    assert again is not None
    assert np.array_equal(again[1]["keys"], arrays["keys"]) and np.array_equal(again[1]["matrix"], arrays["matrix"])


def test_arrays_stay_readable_after_their_file_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / f"c1-t{snapshot_files.SUFFIX}"
    meta = {"format": snapshot_files.FORMAT, "token": "t"}
    snapshot_files.write(path, meta, {"keys": np.arange(100_000, dtype=np.int64)})
    found = snapshot_files.read(path, meta, ["keys"])
    assert found is not None
    snapshot_files.write(path, meta, {"keys": np.zeros(3, np.int64)})  # os.replace: the mapped file lives on
    assert int(found[1]["keys"].sum()) == 100_000 * 99_999 // 2
    path.unlink()
    assert int(found[1]["keys"][-1]) == 99_999
