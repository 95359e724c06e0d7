"""One-shot and long-lived processes (app/collector.py): a CLI command skips the heap settling that only
pays back over later requests, and freezes what it built while the collector was paused."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import typer

from app import collector
from app.cli import app, long_lived, worker_command
from app.collections import snapshot
from app.collections.service import ensure_collection
from app.config import get_settings
from tests.conftest import Database


@pytest.fixture
def one_shot() -> Iterator[None]:
    """This test process marked one-shot; long-lived again after, with nothing left frozen."""
    collector.mark_one_shot()
    try:
        yield
    finally:
        collector.mark_one_shot(False)
        gc.unfreeze()


def _collections_during(action: Any) -> list[int]:
    """The generations the cyclic collector collected while ``action`` ran, with automatic collections off
    (an explicit ``gc.collect`` still runs and reports)."""
    seen: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    was_enabled = gc.isenabled()
    gc.disable()
    gc.callbacks.append(count)
    try:
        action()
    finally:
        gc.callbacks.remove(count)
        if was_enabled:
            gc.enable()
    return seen


def _cold_build(db: Database) -> None:
    with db.session() as session:
        target = ensure_collection(session, "settled")
        session.commit()
        snapshot.clear()
        snapshot.current(session, target)


def test_a_long_lived_process_settles_the_heap_after_a_cold_build(sqlite_db: Database) -> None:
    assert not collector.is_one_shot()  # the default: the web server's and a worker's processes
    gc.unfreeze()
    assert _collections_during(lambda: _cold_build(sqlite_db)) == [2]  # one full collection
    assert gc.get_freeze_count() > 0


def test_a_one_shot_process_only_freezes_after_a_cold_build(sqlite_db: Database, one_shot: None) -> None:
    gc.unfreeze()
    assert _collections_during(lambda: _cold_build(sqlite_db)) == []
    assert gc.get_freeze_count() > 0  # later collections do not walk the snapshot and the start-up again


def test_the_end_of_the_last_pause_freezes_in_a_one_shot_process_only() -> None:
    for marked in (False, True):
        collector.mark_one_shot(marked)
        gc.unfreeze()
        try:
            with collector.paused():
                built = [[n] for n in range(1000)]
                assert gc.get_freeze_count() == 0
            assert gc.isenabled()
            assert (gc.get_freeze_count() >= len(built)) is marked
        finally:
            collector.mark_one_shot(False)
            gc.unfreeze()


MAIN_MARKS = """
import sys
from app import collector
from app.cli import main
assert not collector.is_one_shot()
sys.argv = ["rubric", "prompts"]
try:
    main()
except SystemExit as done:
    assert not done.code, done.code
assert collector.is_one_shot()
"""


def test_the_script_marks_its_process_one_shot() -> None:
    subprocess.run([sys.executable, "-c", MAIN_MARKS], check=True, capture_output=True)


def test_the_serving_commands_clear_the_mark(one_shot: None) -> None:
    assert long_lived(collector.is_one_shot)() is False
    wrapper = long_lived(print).__code__  # every long_lived command runs this code first
    serving = {c.name for c in app.registered_commands if c.callback is not None and c.callback.__code__ is wrapper}
    assert serving == {"serve", "demo", "worker"}


def test_a_worker_without_redis_is_still_refused_after_marking(
    sqlite_db: Database, one_shot: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RUBRIC_REDIS_URL", raising=False)
    get_settings.cache_clear()
    with pytest.raises(typer.Exit) as refused:
        worker_command()
    assert refused.value.exit_code == 2 and not collector.is_one_shot()
