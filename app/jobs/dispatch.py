"""Where batches run: Celery on Redis when ``RUBRIC_REDIS_URL`` is set, else the embedded worker.

Call ``dispatch`` only after the job's transaction has committed, so a worker never looks for
a batch that is not there yet.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.config import get_settings

GRADE_TASK = "grading.grade_cells"
GENERATE_TASK = "banks.generate"


def dispatch(batch_ids: Iterable[int]) -> None:
    ids = list(batch_ids)
    if not ids:
        return
    url = get_settings().redis_url
    if url:
        from worker.celery_app import app as celery_app

        with celery_app.connection_for_write(url) as connection:
            for batch_id in ids:
                celery_app.send_task(GRADE_TASK, args=[batch_id], queue="gpu", connection=connection)
        return
    from app.jobs.embedded import embedded_worker

    embedded_worker().submit_batches(ids)


def dispatch_generation(job_id: int) -> None:
    url = get_settings().redis_url
    if url:
        from worker.celery_app import app as celery_app

        with celery_app.connection_for_write(url) as connection:
            celery_app.send_task(GENERATE_TASK, args=[job_id], queue="gpu", connection=connection)
        return
    from app.jobs.embedded import embedded_worker

    embedded_worker().submit_generation(job_id)
