"""Benchmark: job machinery overhead, and the latency from a rubric edit to the final grades event.

1. Overhead per task: the sample collection's 72 cells graded with SmolLM2 (`score`, fp32, CPU) in
   batches of 8, (a) by calling the grading engine directly on the same batches, committing each,
   and (b) as a job whose batches run through ``execute_batch`` on a real Celery worker over a
   real Redis (when redis-server is installed) and on the embedded worker. The caches are emptied
   before each run, so every run does the same model work. The model's speed drifts by 10 % and
   more between runs on a shared VM, so besides the wall-clock ratio the overhead is also measured
   within each run: wall time minus the time spent inside the grading engine, which every batch
   records (``job_batch.seconds``), over that engine time.
2. Edit → leaderboard latency on a warm cache: a judge edits a question to a text whose cells are
   already cached; time from the save to the final grades event (on which open leaderboards
   re-fetch), with the similarity grader.

Run: ``.venv/bin/python bench/jobs.py``; writes a section of docs/benchmarks.md.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sqlalchemy import delete, func, select  # noqa: E402

from app.collections.revision import next_revision  # noqa: E402
from app.collections.service import (  # noqa: E402
    ensure_collection,
    get_collection,
    import_interchange,
    import_official,
    import_queries,
)
from app.config import get_settings  # noqa: E402
from app.db import engine_for, session_scope  # noqa: E402
from app.events import listen  # noqa: E402
from app.grading.engine import (  # noqa: E402
    CellScope,  # noqa: E402
    ensure_method_grader,
    grade_batch,
)
from app.grading.service import GraderSpec, plan_for  # noqa: E402
from app.jobs.launch import launch_after_edit, launch_grading, wait_until_finished  # noqa: E402
from app.jobs.service import method_for  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from app.models import BankItem, Collection, Grade, GradeCache, JobBatch  # noqa: E402
from app.rubrics.editing import ItemChange, apply_edit  # noqa: E402
from app.rubrics.service import import_banks  # noqa: E402
from app.samples import write_sample  # noqa: E402
from bench.report import machine, stamp, write_section  # noqa: E402

SPEC = GraderSpec(backend="hf", model="smollm2", mode="score", dtype="float32", max_tokens=384)
BATCH = 8
RUNS = 3
EDIT_REPEATS = 5


def setup(directory: Path) -> None:
    os.environ["RUBRIC_DATABASE_URL"] = f"sqlite:///{directory / 'bench.sqlite'}"
    get_settings.cache_clear()
    upgrade(get_settings().database_url)
    files = write_sample(directory / "sample")
    with session_scope() as session:
        collection = ensure_collection(session, "sample")
        import_queries(session, collection, files.queries)
        import_interchange(session, collection, files.passages)
        import_banks(session, collection, [files.bank])
        import_official(session, collection, files.official)


def clear_grades() -> None:
    with session_scope() as session:
        session.execute(delete(Grade))
        session.execute(delete(GradeCache))
        # a deletion is not a delta the evaluation snapshots can read: make every process rebuild its own
        for collection_id in session.scalars(select(Collection.id)):
            next_revision(session, collection_id, structural=True)


def direct_run() -> Run:
    """The grading engine called on the same batches a job would make, one commit per batch (the baseline)."""
    clear_grades()
    with session_scope() as session:
        collection = get_collection(session, "sample")
        cells = plan_for(session, collection, SPEC, None, CellScope())
        method = method_for(SPEC)
        grader_pk = ensure_method_grader(session, method)
        session.commit()
        start_time = time.perf_counter()
        engine = 0.0
        for begin in range(0, len(cells), BATCH):
            batch_start = time.perf_counter()
            grade_batch(session, method, grader_pk, cells[begin : begin + BATCH])
            engine += time.perf_counter() - batch_start
            session.commit()
        return Run(time.perf_counter() - start_time, engine)


@dataclass(frozen=True)
class Run:
    wall: float  # launch to finished
    engine: float  # inside the grading engine (the model work every path shares)

    @property
    def overhead(self) -> float:
        return self.wall / self.engine - 1


def job_run() -> Run:
    """Launch, dispatch and wait for a job; its batches run on whichever worker is configured."""
    clear_grades()
    start_time = time.perf_counter()
    with session_scope() as session:
        job = launch_grading(session, get_collection(session, "sample"), SPEC, batch_cells=BATCH)
        session.commit()
        job_id = job.id
    wait_until_finished(job_id, poll=0.2)  # a light poll: the 2 cores belong to the worker
    wall = time.perf_counter() - start_time
    with session_scope() as session:
        engine = session.scalar(select(func.sum(JobBatch.seconds)).where(JobBatch.job_pk == job_id))
    return Run(wall, float(engine or 0.0))


def edit_latency(old: str, new: str) -> float:
    """Seconds from saving an edit to receiving the final grades event of its regrade."""
    with session_scope() as session:
        collection_id = get_collection(session, "sample").id
    received = threading.Event()
    ready = threading.Event()

    def watch() -> None:
        stream = listen(collection_id, timeout=0.05)
        ready.set()
        ended = False  # a job's last batch publishes its end (``jobs``), then the grades revision
        for event in stream:
            ended = ended or bool(event and event.get("type") == "jobs" and event.get("state") == "done")
            if ended and event and event.get("type") == "grades":
                received.set()
                return

    threading.Thread(target=watch, daemon=True).start()
    ready.wait(5)
    time.sleep(0.2)
    begin = time.perf_counter()
    with session_scope() as session:
        collection = get_collection(session, "sample")
        item = session.scalars(select(BankItem).where(BankItem.text == old)).first()
        assert item is not None
        result = apply_edit(
            session, collection, [ItemChange("edit", "bees", item.item_id, new, expected_text=old)], user="bench"
        )
        launch_after_edit(session, collection, result, GraderSpec(), "bench")
        session.commit()  # the after-commit hook hands the batches to the workers
    assert received.wait(30), "no grades event"
    return time.perf_counter() - begin


def edit_latencies() -> list[float]:
    wait_until_finished(launch_similarity())
    a, b = "What is the waggle dance?", "What does the waggle dance tell other bees?"
    edit_latency(a, b)  # grades b once; from here on both texts are cached
    edit_latency(b, a)
    timings = []
    for _ in range(EDIT_REPEATS):
        timings.append(edit_latency(a, b))
        timings.append(edit_latency(b, a))
    return timings


def launch_similarity() -> int:
    with session_scope() as session:
        job = launch_grading(session, get_collection(session, "sample"), GraderSpec())
        session.commit()
        job_id = job.id
    return job_id


@contextmanager
def celery_worker(directory: Path) -> Iterator[bool]:
    """A real redis-server and `rubric worker` for the duration; yields False when Redis is missing."""
    if shutil.which("redis-server") is None:
        yield False
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    redis = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--dir", str(directory)], stdout=subprocess.DEVNULL
    )
    os.environ["RUBRIC_REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
    get_settings.cache_clear()
    time.sleep(0.5)
    worker = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "worker", "--queues", "gpu,default"],
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        job_run()  # warm-up: the worker loads its model on its first batch
        yield True
    finally:
        worker.terminate()
        worker.wait(30)
        redis.terminate()
        redis.wait(10)
        del os.environ["RUBRIC_REDIS_URL"]
        get_settings.cache_clear()


def median_run(runs: list[Run]) -> Run:
    """The run with the median overhead."""
    return sorted(runs, key=lambda r: r.overhead)[len(runs) // 2]


def main() -> None:
    directory = Path(tempfile.mkdtemp())
    setup(directory)
    direct_run()  # warm-up: loads the model in this process
    job_run()  # warm-up: loads the model in the embedded worker's grading thread
    rows = []
    direct = median_run([direct_run() for _ in range(RUNS)])
    rows.append(("grading engine called directly, same batches", direct))
    rows.append(("job on the embedded worker (threads, no Redis)", median_run([job_run() for _ in range(RUNS)])))
    with celery_worker(directory) as available:
        if available:
            rows.append(("job on a Celery worker over Redis", median_run([job_run() for _ in range(RUNS)])))
            celery_edit = edit_latencies()
    embedded_edit = edit_latencies()
    engine_for.cache_clear()
    table = "\n".join(
        f"| {name} | {run.wall:.2f} s | {run.engine:.2f} s | {100 * run.overhead:+.1f} % | "
        f"{100 * (run.wall / direct.wall - 1):+.1f} % |"
        for name, run in rows
    )
    edits = [("embedded worker", embedded_edit)] + (
        [("Celery worker over Redis", celery_edit)] if len(rows) == 3 else []
    )
    edit_rows = "\n".join(
        f"| {name} | {statistics.median(t) * 1000:.0f} ms | {max(t) * 1000:.0f} ms |" for name, t in edits
    )
    body = f"""Measured {stamp()} on {machine()}, SQLite.
Workload: the sample collection's 72 cells, SmolLM2-135M-Instruct `score` (fp32, CPU), batches of {BATCH} cells,
caches emptied before every run, workers warmed up first; the run with the median overhead of {RUNS} each.
*Overhead* is measured within the run: (wall time − time inside the grading engine) / engine time, which is
immune to the model's speed drifting between runs. The wall-clock ratio to the direct run is shown too.

| path | wall time | in the engine | overhead | wall vs direct |
|---|---|---|---|---|
{table}

Target: overhead < 10 % on CPU.

Rubric edit → final grades event, warm cache (similarity grader; the edit toggles a question between two
texts whose cells are both cached; {2 * EDIT_REPEATS} edits):

| worker | median | max |
|---|---|---|
{edit_rows}

Target: < 2 s."""
    write_section("Jobs: task overhead and edit-to-leaderboard latency (`bench/jobs.py`)", body)


if __name__ == "__main__":
    main()
