"""What committed job work tells the viewers: facts they re-fetch on, never anything computed for them.

Every event is published after the commit of the rows it announces, so a page that re-fetches on
it reads them. Events (SSE event name: payload):

* ``grades``: ``{"type": "grades", "revision": R}``, the collection's revision after a batch; at
  most one a second per collection, and always after a job's last batch (or an empty job, whose
  rubric edit alone changes the leaderboard). Leaderboard pages re-fetch on it.
* ``job-<id>``: ``{"type": "job", "event": "job-<id>", "job": id, "state": …, "total": …, …}``,
  the job's counters after each of its batches; only that job's row listens.
* ``jobs``: ``{"type": "jobs", "job": id, "state": …}`` when a job appears or ends; pages that
  list jobs re-fetch the list once.
"""

from __future__ import annotations

import threading
import time
from functools import partial

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import after_commit
from app.events import Event, publish, redis_client
from app.models import Collection, Job

_LIVE = ("queued", "running")
_last_sent: dict[int, float] = {}
_lock = threading.Lock()


def job_event(job: Job) -> Event:
    """The job's own progress, named after it so that only its row re-fetches."""
    return {
        "type": "job",
        "event": f"job-{job.id}",
        "job": job.id,
        "kind": job.kind,
        "state": job.state,
        "total": job.total,
        "done": job.done,
        "cached": job.cached,
        "errors": job.errors,
        "model_calls": job.model_calls,
    }


def jobs_event(job: Job) -> Event:
    return {"type": "jobs", "job": job.id, "state": job.state}


def grades_event(revision: int) -> Event:
    return {"type": "grades", "revision": revision}


def _due(collection_id: int) -> bool:
    """At most one ``grades`` event per collection per second, across processes when Redis is there."""
    client = redis_client()
    if client is not None:
        return bool(client.set(f"rubric:grades-throttle:{collection_id}", 1, nx=True, px=1000))
    with _lock:
        now = time.monotonic()
        if now - _last_sent.get(collection_id, 0.0) < 1.0:
            return False
        _last_sent[collection_id] = now
        return True


def _revision(session: Session, collection_id: int) -> int:
    """Read fresh: the batch's own writes took the revision with an UPDATE that the session does not see."""
    return int(session.scalar(select(Collection.revision).where(Collection.id == collection_id)) or 0)


def after_batch(session: Session, job: Job) -> None:
    """Announce a committed batch (or an empty job): its job's progress, then the grades revision."""
    publish(job.collection_id, job_event(job))
    finished = job.state not in _LIVE
    if finished:
        publish(job.collection_id, jobs_event(job))
    if finished or _due(job.collection_id):
        publish(job.collection_id, grades_event(_revision(session, job.collection_id)))


def after_generation(job: Job) -> None:
    """A drafting job ended (its draft is committed): no grades changed, only the job."""
    publish(job.collection_id, job_event(job))
    publish(job.collection_id, jobs_event(job))


def announce_launch(session: Session, job: Job) -> None:
    """Once ``session`` commits, pages that list jobs show the new one.

    An empty job is born finished: the launcher announces it with its end (``after_batch``).
    """
    if job.state in _LIVE:
        after_commit(session, partial(publish, job.collection_id, jobs_event(job)))


def announce_cancel(session: Session, job: Job) -> None:
    """Once ``session`` commits: the cancelled job's row, and the lists, show it stopped."""
    after_commit(session, partial(publish, job.collection_id, job_event(job)))
    after_commit(session, partial(publish, job.collection_id, jobs_event(job)))
