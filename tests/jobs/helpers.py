"""Shared by the job tests: launch on the sample collection, watch events, wait for the end."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select

from app.collections.service import get_collection
from app.events import listen
from app.grading.engine import CellScope
from app.grading.service import GraderSpec
from app.jobs.launch import launch_after_edit, launch_grading
from app.models import Grade, Job
from app.rubrics.editing import ItemChange, apply_edit
from tests.conftest import Database

SMOLLM2_SCORE = GraderSpec(backend="hf", model="smollm2", mode="score", dtype="float32", max_tokens=384)


@dataclass
class EventLog:
    collection_id: int
    events: list[dict[str, Any]] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        stream = listen(self.collection_id, timeout=0.2)
        self.ready.set()
        for event in stream:
            if self.stop.is_set():
                break
            if event is not None:
                self.events.append(event)

    def of(self, kind: str, job_id: int | None = None) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind and (job_id is None or e.get("job") == job_id)]

    def final_grades(self, job_id: int) -> dict[str, Any] | None:
        """The ``grades`` event that follows the job's last progress event (always sent at a job's end)."""
        events = list(self.events)
        ends = [n for n, e in enumerate(events) if e["type"] == "job" and e["job"] == job_id and e["state"] == "done"]
        later = [e for e in events[ends[0] :] if e["type"] == "grades"] if ends else []
        return later[0] if later else None


def watch(db: Database) -> EventLog:
    with db.session() as session:
        log = EventLog(get_collection(session, "sample").id)
    threading.Thread(target=log.run, daemon=True).start()
    assert log.ready.wait(10)
    time.sleep(0.3)  # the Redis subscription is live once the first get_message ran
    return log


def launch(db: Database, spec: GraderSpec = GraderSpec(), batch_cells: int = 16, scope: CellScope = CellScope()) -> int:
    with db.session() as session:
        job = launch_grading(session, get_collection(session, "sample"), spec, scope=scope, batch_cells=batch_cells)
        session.commit()
        job_id = job.id
    return job_id


def edit_and_regrade(
    db: Database, item_text: str, new_text: str, spec: GraderSpec = GraderSpec()
) -> tuple[int, list[str]]:
    from app.models import BankItem

    with db.session() as session:
        collection = get_collection(session, "sample")
        item = session.scalars(select(BankItem).where(BankItem.text == item_text)).first()
        assert item is not None
        result = apply_edit(
            session,
            collection,
            [ItemChange("edit", "bees", item.item_id, new_text, expected_text=item_text)],
            user="judge",
        )
        job = launch_after_edit(session, collection, result, spec, "judge")
        session.commit()
        job_id, added = job.id, result.added_item_ids
    return job_id, added


def wait_for(predicate: Callable[[], bool], timeout: float = 120, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def job_row(db: Database, job_id: int) -> Job:
    with db.session() as session:
        job = session.get_one(Job, job_id)
        session.expunge(job)
        return job


def wait_job(db: Database, job_id: int, timeout: float = 180) -> Job:
    wait_for(lambda: job_row(db, job_id).state not in ("queued", "running"), timeout, f"job {job_id}")
    return job_row(db, job_id)


def grade_count(db: Database) -> int:
    with db.session() as session:
        return int(session.scalar(select(func.count()).select_from(Grade)) or 0)


def cover_board(db: Database) -> dict[str, Any]:
    """What a leaderboard page shows after a ``grades`` event: Cover at 4 on the newest rubric, primary grader."""
    from app.leaderboards.service import LeaderboardRequest, compute_leaderboard, leaderboard_json
    from app.rubrics.service import latest_version

    with db.session() as session:
        collection = get_collection(session, "sample")
        version = latest_version(session, collection)
        assert version is not None
        request = LeaderboardRequest(measure="cover", min_rating=4, rubric_version=version.number, bootstrap_samples=0)
        return leaderboard_json(compute_leaderboard(session, collection, request))


def revision(db: Database) -> int:
    with db.session() as session:
        return get_collection(session, "sample").revision


def weak_bees_cover(board: dict[str, Any]) -> float:
    return next(s["per_query"].get("bees", 0.0) for s in board["systems"] if s["system"] == "weak-ranker")
