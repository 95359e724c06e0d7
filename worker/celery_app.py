"""The Celery application: Redis broker from RUBRIC_REDIS_URL, a CPU queue and a GPU queue.

Importing this module loads no model: grading methods are built lazily, once per worker process
(``app.jobs.service.method_for``), so nothing heavy happens in the parent before fork.
"""

from __future__ import annotations

import logging
import threading

from celery import Celery
from celery.signals import worker_ready

from app.config import get_settings

settings = get_settings()
app = Celery("rubric", broker=settings.redis_url or "redis://127.0.0.1:6379/0", include=["worker.tasks"])
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    result_serializer="json",
    task_ignore_result=True,
    task_acks_late=True,  # a task is acknowledged when done, so a killed worker's batch is redelivered
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,  # the gpu queue takes one batch at a time
    broker_transport_options={"visibility_timeout": settings.visibility_timeout},
    broker_connection_retry_on_startup=True,
    broker_connection_max_retries=None,  # ride out a Redis restart
    task_default_queue="default",
    task_routes={"grading.*": {"queue": "gpu"}, "banks.*": {"queue": "gpu"}},
    worker_hijack_root_logger=False,
)


log = logging.getLogger(__name__)
# Where this worker sends its sweep requests: a queue it consumes itself, so a lone
# ``--queues gpu`` worker still recovers orphaned batches (``rubric worker`` sets it).
sweep_queue = "default"


def consume_queues(queues: list[str]) -> None:
    """Record the queues this worker process consumes (before ``worker_main``)."""
    global sweep_queue
    sweep_queue = "default" if "default" in queues or not queues else queues[0]


def sweep_period() -> float:
    """How often orphans are looked for: a third of the stale threshold (the web process does the same)."""
    return max(get_settings().job_stale_seconds / 3, 1.0)


@worker_ready.connect  # type: ignore[untyped-decorator]
def _sweep_on_start(**_: object) -> None:
    """A new worker first requeues batches orphaned by a dead one, then asks for a sweep periodically.

    The periodic request is a task message (the sweep runs in a pool process, not in this parent,
    which must not open database connections that forked children would share); it expires
    after one period, so requests never pile up behind a long batch.
    """
    app.send_task("jobs.sweep", queue=sweep_queue)
    threading.Thread(target=_request_sweeps, name="rubric-sweep-requests", daemon=True).start()


def _request_sweeps() -> None:
    period = sweep_period()
    stop = threading.Event()
    while not stop.wait(period):
        try:
            app.send_task("jobs.sweep", queue=sweep_queue, expires=period)
        except Exception:  # noqa: BLE001  the broker is away; the next period tries again
            log.warning("could not request a sweep", exc_info=True)
