"""The embedded worker: with no Redis, the same tasks run in threads of this process.

One grading thread (models are not shared between threads) and a small pool for CPU work, using
the same job rows and the same ``execute_batch`` as a Celery worker. This is what ``rubric demo``
uses; production runs Redis and separate ``rubric worker`` processes.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from functools import lru_cache

from app.config import get_settings
from app.db import engine_for, session_scope
from app.events import publish
from app.jobs.events import after_batch, job_event
from app.jobs.service import execute_batch, execute_generation

log = logging.getLogger(__name__)


class EmbeddedWorker:
    def __init__(self) -> None:
        self.grading = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rubric-grading")
        self.cpu = ThreadPoolExecutor(max_workers=2, thread_name_prefix="rubric-cpu")
        self._pending: set[Future[None]] = set()
        self._lock = threading.Lock()

    def submit_batches(self, batch_ids: list[int]) -> None:
        url = get_settings().database_url  # the database the job lives in, fixed at submission
        for batch_id in batch_ids:
            future = self.grading.submit(self._run, url, batch_id)
            with self._lock:
                self._pending.add(future)
            future.add_done_callback(self._forget)

    def submit_generation(self, job_id: int) -> None:
        future = self.grading.submit(self._generate, get_settings().database_url, job_id)
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(self._forget)

    def _forget(self, future: Future[None]) -> None:
        with self._lock:
            self._pending.discard(future)

    def idle(self) -> bool:
        with self._lock:
            return not self._pending

    @staticmethod
    def _generate(url: str, job_id: int) -> None:
        try:
            with session_scope(engine_for(url)) as session:
                job = execute_generation(session, job_id)
                publish(job.collection_id, job_event(job))
        except Exception:
            log.exception("embedded drafting job %s failed", job_id)

    @staticmethod
    def _run(url: str, batch_id: int) -> None:
        try:
            with session_scope(engine_for(url)) as session:
                job = execute_batch(session, batch_id)
                if job is not None:
                    after_batch(session, job)
        except Exception:  # a thread has nobody to raise to; the sweep requeues the batch
            log.exception("embedded batch %s failed", batch_id)


@lru_cache(maxsize=1)
def embedded_worker() -> EmbeddedWorker:
    return EmbeddedWorker()
