"""The embedded worker: with no Redis, the same tasks run in threads of this process.

One grading thread (models are not shared between threads), one drafting thread (so drafting a
test bank never waits for, or blocks, grading), using the same job rows and the same
``execute_batch`` / ``execute_generation`` as a Celery worker. This is what ``rubric demo`` uses;
production runs Redis and separate ``rubric worker`` processes.

The worker remembers what it holds (queued or running here), so the sweep hands it the queued
batches it lost, e.g. when the web process restarted.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Literal

from app.config import get_settings
from app.db import engine_for, session_scope
from app.jobs.events import after_batch, after_generation
from app.jobs.service import execute_batch, execute_generation

log = logging.getLogger(__name__)
Held = tuple[str, Literal["batch", "job"], int]  # database url, what, id


class EmbeddedWorker:
    def __init__(self) -> None:
        self.grading = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rubric-grading")
        self.drafting = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rubric-drafting")
        self._held: dict[Held, int] = {}  # how many submissions of each are pending
        self._lock = threading.Lock()

    def submit_batches(self, batch_ids: list[int]) -> None:
        url = get_settings().database_url  # the database the job lives in, fixed at submission
        for batch_id in batch_ids:
            self._submit(self.grading, (url, "batch", batch_id))

    def submit_generation(self, job_id: int) -> None:
        self._submit(self.drafting, (get_settings().database_url, "job", job_id))

    def _submit(self, pool: ThreadPoolExecutor, held: Held) -> None:
        with self._lock:
            self._held[held] = self._held.get(held, 0) + 1
        future = pool.submit(self._generate if held[1] == "job" else self._run, held[0], held[2])
        future.add_done_callback(lambda _f: self._forget(held))

    def _forget(self, held: Held) -> None:
        with self._lock:
            left = self._held.pop(held, 1) - 1
            if left:
                self._held[held] = left

    def holds(self, url: str, what: Literal["batch", "job"], ident: int) -> bool:
        with self._lock:
            return (url, what, ident) in self._held

    def idle(self) -> bool:
        with self._lock:
            return not self._held

    @staticmethod
    def _generate(url: str, job_id: int) -> None:
        try:
            with session_scope(engine_for(url)) as session:
                after_generation(execute_generation(session, job_id))
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
