"""What a finished batch tells the viewers: job progress, and the live leaderboard at most once a second."""

from __future__ import annotations

import threading
import time
from typing import Any

from sqlalchemy.orm import Session

from app.events import publish, redis_client
from app.grading.service import GraderSpec, build_method
from app.leaderboards.service import LeaderboardRequest, compute_leaderboard, leaderboard_json
from app.models import Collection, Job
from app.rubrics.service import latest_version

LIVE_MEASURE = "cover"
LIVE_MIN_RATING = 4
_last_sent: dict[int, float] = {}
_lock = threading.Lock()


def job_event(job: Job) -> dict[str, Any]:
    return {
        "type": "job",
        "job": job.id,
        "kind": job.kind,
        "state": job.state,
        "total": job.total,
        "done": job.done,
        "cached": job.cached,
        "errors": job.errors,
        "model_calls": job.model_calls,
    }


def _due(collection_id: int) -> bool:
    """At most one leaderboard push per collection per second, across processes when Redis is there."""
    client = redis_client()
    if client is not None:
        return bool(client.set(f"rubric:leaderboard-throttle:{collection_id}", 1, nx=True, px=1000))
    with _lock:
        now = time.monotonic()
        if now - _last_sent.get(collection_id, 0.0) < 1.0:
            return False
        _last_sent[collection_id] = now
        return True


def live_leaderboard(session: Session, collection: Collection, spec: GraderSpec) -> dict[str, Any]:
    """The leaderboard of the newest published rubric under the job's grader."""
    config = build_method(spec).config()
    version = latest_version(session, collection)
    request = LeaderboardRequest(
        measure=LIVE_MEASURE,
        min_rating=LIVE_MIN_RATING,
        model=config.model,
        prompt_class=config.prompt_class,
        rubric_version=version.number if version and spec.prompt_type != "direct_grading" else None,
        bootstrap_samples=0,
    )
    return leaderboard_json(compute_leaderboard(session, collection, request))


def after_batch(session: Session, job: Job) -> None:
    publish(job.collection_id, job_event(job))
    finished = job.state not in ("queued", "running")
    if not (finished or _due(job.collection_id)):
        return
    collection = session.get_one(Collection, job.collection_id)
    try:
        board = live_leaderboard(session, collection, GraderSpec.from_dict(job.params["grader"]))
    except LookupError:  # nothing gradable yet (no grades of this grader)
        return
    publish(job.collection_id, {"type": "leaderboard", "job": job.id, "final": finished, **board})
