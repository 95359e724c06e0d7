"""Where batches run: Celery on Redis when ``RUBRIC_REDIS_URL`` is set, else the embedded worker.

Call ``dispatch`` only after the job's transaction has committed, so a worker never looks for
a batch that is not there yet.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.config import get_settings

GRADE_TASK = "grading.grade_cells"


def dispatch(batch_ids: Iterable[int]) -> None:
    ids = list(batch_ids)
    if not ids:
        return
    if get_settings().redis_url:
        from worker.celery_app import app as celery_app

        for batch_id in ids:
            celery_app.send_task(GRADE_TASK, args=[batch_id], queue="gpu")
        return
    from app.jobs.embedded import embedded_worker

    embedded_worker().submit_batches(ids)
