"""What committed job work tells the viewers: facts they re-fetch on, never anything computed for them.

Every event is published after the commit of the rows it announces, so a page that re-fetches on
it reads them. Events (SSE event name: payload):

* ``grades``: ``{"type": "grades", "revision": R}``, the collection's revision after a batch; at
  most one a second per collection, and always after a job's last batch (or an empty job, whose
  rubric edit alone changes the leaderboard). Leaderboard pages re-fetch on it.
* ``job-<id>``: ``{"type": "job", "event": "job-<id>", "job": id, "state": …, "total": …, …}``,
  the job's counters after each of its batches; only that job's row listens.
* ``job-<id>`` also carries ``{"type": "job-progress", …the job's counters…, "in_batch": n}``
  while a batch runs: n cells of the running batch are computed but NOT committed yet (at most two
  such events a second per job). They are a hint, not a fact: if the worker dies, those n cells are
  lost and graded again; the committed counters in the row (re-fetched after each batch) stay the
  truth, so the row shows ``done + in_batch`` only until the batch's own ``job`` event arrives.
* ``jobs``: ``{"type": "jobs", "job": id, "state": …}`` when a job appears or ends; pages that
  list jobs re-fetch the list once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import after_commit
from app.events import Event, publish, redis_client
from app.models import Collection, Job

_LIVE = ("queued", "running")
_last_sent: dict[str, float] = {}
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


def in_batch_event(committed: Event, in_batch: int) -> Event:
    """``committed`` (a ``job_event`` taken before the batch's model calls) plus the batch's uncommitted cells."""
    return {**committed, "type": "job-progress", "in_batch": in_batch}


def in_batch_publisher(job: Job) -> Callable[[int], None]:
    """The engine's progress callback for one running batch: ``in_batch_event``, at most two a second per job.

    Everything is read from ``job`` now, so the callback, called from the worker thread that waits
    for the model, touches no database, only ``publish``. The throttle's key has the job's creation
    time: a recreated database's job with the same id is another job.
    """
    collection_id, committed = job.collection_id, job_event(job)
    topic = f"job-progress:{job.id}:{job.created_at.timestamp() if job.created_at else 0}"

    def report(in_batch: int) -> None:
        if in_batch > 0 and _due(topic, 0.5):
            publish(collection_id, in_batch_event(committed, in_batch))

    return report


def jobs_event(job: Job) -> Event:
    return {"type": "jobs", "job": job.id, "state": job.state}


def grades_event(revision: int) -> Event:
    return {"type": "grades", "revision": revision}


def _due(topic: str, seconds: float = 1.0) -> bool:
    """At most one event of ``topic`` per ``seconds``, across processes when Redis is there."""
    client = redis_client()
    if client is not None:
        return bool(client.set(f"rubric:throttle:{topic}", 1, nx=True, px=int(seconds * 1000)))
    with _lock:
        now = time.monotonic()
        if now - _last_sent.get(topic, -seconds) < seconds:
            return False
        _last_sent[topic] = now
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
    if finished or _due(f"grades:{job.collection_id}"):
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
