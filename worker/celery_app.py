"""The Celery application: Redis broker from RUBRIC_REDIS_URL, a CPU queue and a GPU queue.

Importing this module loads no model: grading methods are built lazily, once per worker process
(``app.jobs.service.method_for``), so nothing heavy happens in the parent before fork.
"""

from __future__ import annotations

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


@worker_ready.connect  # type: ignore[untyped-decorator]
def _sweep_on_start(**_: object) -> None:
    """A new worker first requeues batches orphaned by a dead one."""
    app.send_task("jobs.sweep", queue="default")
