"""Benchmark: job reliability with the DEFAULT job settings (heartbeat, stale threshold, sweep period).

1. Recovery after ``kill -9`` of a Celery worker mid-batch. A real redis-server (appendonly), a
   migrated SQLite database with the sample collection, a real ``rubric worker`` subprocess and a
   slow grader: the gated OpenAI-compatible server of tests/jobs/test_reliability.py, whose answers
   wait until the benchmark opens the gate, so the batch is mid-flight by construction. The worker
   is killed, a fresh one started, and we time from the kill until the batch is requeued (back to
   ``queued`` or claimed again) and until the job is done.
   Who sweeps: a worker requests sweeps on the ``default`` queue, so one started with
   ``--queues gpu`` never sweeps; the web process sweeps every ``job_stale_seconds / 3``. The
   main trials run ``--queues gpu`` workers next to a real uvicorn web process (its periodic
   sweep); one extra trial runs a ``gpu,default`` worker with no web process (the worker sweeps).
2. A Redis outage: redis-server is stopped while the worker and the web run; N grading jobs are
   launched through the web (a signed-in organizer over HTTP); we count 5xx answers and read the
   jobs page, restart Redis on the same port, and time until every job is done (lost jobs: any
   that never finish).

Run: ``.venv/bin/python bench/reliability.py [--keep]`` (about 4 minutes; bounded at 10). Prints a Markdown
table; the temporary directory (database, logs) is kept when a check fails or with ``--keep``.
"""

from __future__ import annotations

import html
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# Default job settings: drop any override from the caller's environment before app.config is read.
for _name in list(os.environ):
    if _name.startswith("RUBRIC_"):
        del os.environ[_name]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx  # noqa: E402
from sqlalchemy import select  # noqa: E402

from app.accounts.service import create_user  # noqa: E402
from app.collections.service import get_collection  # noqa: E402
from app.config import Settings, get_settings  # noqa: E402
from app.db import engine_for, session_scope  # noqa: E402
from app.grading.engine import CellScope  # noqa: E402
from app.grading.service import GraderSpec  # noqa: E402
from app.jobs import service  # noqa: E402
from app.jobs.launch import launch_grading  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from app.models import Job, JobBatch  # noqa: E402
from tests.grading.conftest import import_sample  # noqa: E402
from tests.jobs.test_reliability import FakeModel, _handler  # noqa: E402
from tests.web.live import csrf_of  # noqa: E402

BUDGET_SECONDS = 570.0  # the whole run, set-up and clean-up included, stays under 10 minutes
START = time.monotonic()
TRIAL_DELAYS = (1.0, 6.0, 12.0)  # seconds the batch runs before the kill: different heartbeat phases
N_OUTAGE_JOBS = 5
OUTAGE_SECONDS = 30.0  # Redis stays down this long: several sweep periods, and the worker's reconnect backoff grows
PASSWORD = "bench-reliability-Password-31"
WEB_SECRET = "bench-reliability-secret-key-0123456789abcdef"
PROCESSES: list[subprocess.Popen[bytes]] = []


def remaining() -> float:
    return BUDGET_SECONDS - (time.monotonic() - START)


def log(message: str) -> None:
    print(f"[{time.monotonic() - START:6.1f} s] {message}", flush=True)


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, poll: float = 0.1) -> float | None:
    """Poll until ``predicate``; the monotonic time it held, or None at the timeout (never past the budget)."""
    deadline = time.monotonic() + min(timeout, max(remaining() - 20, 0))
    while True:
        if predicate():
            return time.monotonic()
        if time.monotonic() >= deadline:
            log(f"timed out waiting for {what}")
            return None
        time.sleep(poll)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn(args: list[str], env: dict[str, str], logfile: Path) -> subprocess.Popen[bytes]:
    handle = logfile.open("ab")
    process = subprocess.Popen(args, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT)
    handle.close()
    PROCESSES.append(process)
    return process


def stop(process: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM, wait: float = 20) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(wait)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


# ---- the processes ----------------------------------------------------------------------------


class Redis:
    def __init__(self, directory: Path) -> None:
        self.port, self.directory = free_port(), directory
        self.process: subprocess.Popen[bytes] | None = None
        directory.mkdir()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", ""]
        args += ["--appendonly", "yes", "--dir", str(self.directory)]
        self.process = spawn(args, dict(os.environ), self.directory.parent / "redis.log")

        def up() -> bool:
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", self.port)) == 0

        if wait_for(up, 10, "redis-server", poll=0.05) is None:
            raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        stop(self.process, wait=10)
        self.process = None


class Worker:
    """``rubric worker --queues QUEUES --concurrency 1`` (Celery, solo pool)."""

    def __init__(self, env: dict[str, str], logfile: Path, queues: str) -> None:
        self.env, self.logfile, self.queues = env, logfile, queues
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [sys.executable, "-m", "app.cli", "worker", "--queues", self.queues, "--concurrency", "1"]
        self.process = spawn(args, self.env, self.logfile)

    def kill9(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        stop(self.process)


def start_web(env: dict[str, str], logfile: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    args = [sys.executable, "-m", "uvicorn", "app.web.main:create_app", "--factory", "--host", "127.0.0.1"]
    process = spawn([*args, "--port", str(port), "--log-level", "warning"], env, logfile)
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"the web process exited; see {logfile}")
        try:
            return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    if wait_for(healthy, 60, "the web process") is None:
        raise RuntimeError("the web process did not become healthy")
    return process, base


def serve_fake_model() -> tuple[FakeModel, ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(FakeModel("")))
    model = FakeModel(f"http://127.0.0.1:{server.server_address[1]}/v1")
    server.RequestHandlerClass = _handler(model)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return model, server


# ---- database reads -----------------------------------------------------------------------------


def job_of(job_id: int) -> Job:
    with session_scope() as session:
        job = session.get_one(Job, job_id)
        session.expunge(job)
        return job


def batches_of(job_id: int) -> list[JobBatch]:
    with session_scope() as session:
        rows = list(session.scalars(select(JobBatch).where(JobBatch.job_pk == job_id).order_by(JobBatch.number)))
        session.expunge_all()
        return rows


def graded_once(job_id: int) -> bool:
    """Done with every cell graded and no error (grade rows are unique per grader and cell)."""
    job = job_of(job_id)
    return job.state == "done" and job.done == job.total and job.errors == 0


# ---- 1. kill -9 mid-batch -----------------------------------------------------------------------


def kill_trial(
    number: int, worker: Worker, fake: FakeModel, delay: float, fresh: Callable[[], Worker]
) -> tuple[dict[str, Any], Worker]:
    """Launch a job on a gated grader, kill -9 the worker mid-batch, start a fresh one; time the recovery."""
    fake.gate.clear()
    spec = GraderSpec(
        backend="openai", model=f"fake-grader-{number}", mode="generate", base_url=fake.url, concurrency=16
    )
    with session_scope() as session:
        job = launch_grading(
            session,
            get_collection(session, "sample"),
            spec,
            scope=CellScope(query_ids=frozenset({"bees"})),
            batch_cells=100,
            launched_by="bench",
        )
        session.flush()
        job_id = job.id
    result: dict[str, Any] = {"trial": number, "queues": worker.queues, "delay": delay, "job": job_id}

    def running() -> bool:
        rows = batches_of(job_id)
        return bool(rows) and rows[0].state == "running" and fake.waiting > 0

    if wait_for(running, 90, f"job {job_id}'s batch to run") is None:
        result["error"] = "the batch never ran"
        return result, worker
    time.sleep(delay)
    before = batches_of(job_id)[0]
    result["attempts_before_kill"] = before.attempts
    worker.kill9()
    killed = time.monotonic()
    fake.gate.set()  # the dead worker's calls are gone; the next worker's calls answer at once
    replacement = fresh()
    replacement.start()
    log(f"trial {number}: killed the {worker.queues} worker {delay:.0f} s into job {job_id}'s batch")
    requeued = claimed = None
    deadline = killed + min(150, max(remaining() - 60, 30))
    while time.monotonic() < deadline:
        batch, job = batches_of(job_id)[0], job_of(job_id)
        now = time.monotonic()
        if requeued is None and (batch.state == "queued" or batch.attempts > before.attempts):
            requeued = now
        if claimed is None and batch.attempts > before.attempts:
            claimed = now
        if job.state not in service.ACTIVE:
            result["done"] = now - killed if job.state == "done" else None
            break
        time.sleep(0.1)
    job = job_of(job_id)
    result["requeued"] = None if requeued is None else requeued - killed
    result["claimed"] = None if claimed is None else claimed - killed
    result.setdefault("done", None)
    result["state"] = job.state
    result["attempts"] = batches_of(job_id)[0].attempts
    result["graded_once"] = graded_once(job_id)
    log(f"trial {number}: {result}")
    return result, replacement


# ---- 2. Redis outage ------------------------------------------------------------------------------


def outage(base: str, redis: Redis) -> dict[str, Any]:
    client = httpx.Client(base_url=base, timeout=90)
    token = csrf_of(client.get("/login").text)
    response = client.post("/login", data={"name": "organizer", "password": PASSWORD, "csrf_token": token})
    assert response.status_code == 303, response.text
    client.headers["X-CSRF-Token"] = csrf_of(client.get("/").text)
    with session_scope() as session:
        before = set(session.scalars(select(Job.id)))
    redis.stop()
    stopped = time.monotonic()
    log("redis-server stopped")
    statuses: list[int] = []
    seconds: list[float] = []
    scopes = ["bees", "bread", "aurora", "", "bees"]
    for index in range(N_OUTAGE_JOBS):
        form = {"backend": "similarity", "prompt_class": "Similarity", "mode": "score", "query_id": scopes[index % 5]}
        began = time.monotonic()
        try:
            answer = client.post("/c/sample/jobs", data=form, follow_redirects=False)
            statuses.append(answer.status_code)
        except httpx.HTTPError as error:
            log(f"launch {index}: {error!r}")
            statuses.append(0)
        seconds.append(time.monotonic() - began)
    page = client.get("/c/sample/jobs")
    with session_scope() as session:
        jobs = sorted(set(session.scalars(select(Job.id))) - before)
    messages = {job_of(j).message for j in jobs}
    result: dict[str, Any] = {
        "statuses": statuses,
        "launch_seconds": seconds,
        "5xx": sum(1 for s in statuses if s >= 500 or s == 0),
        "jobs": jobs,
        "messages": sorted(messages),
        "page_status": page.status_code,
        "page_says_undelivered": html.escape(service.UNDELIVERED) in page.text or service.UNDELIVERED in page.text,
        "states_while_down": [job_of(j).state for j in jobs],
    }
    log(f"outage launches: {result}")
    time.sleep(max(OUTAGE_SECONDS - (time.monotonic() - stopped), 0))
    redis.start()
    restarted = time.monotonic()
    log("redis-server restarted on the same port")

    def all_done() -> bool:
        return all(job_of(j).state not in service.ACTIVE for j in jobs)

    finished = wait_for(all_done, 240, "the outage jobs", poll=0.2)
    states = [job_of(j).state for j in jobs]
    result["outage_seconds"] = restarted - stopped
    result["done_after_restart"] = None if finished is None else finished - restarted
    result["final_states"] = states
    result["lost"] = sum(1 for s in states if s != "done")
    result["final_messages"] = sorted({job_of(j).message for j in jobs})
    log(f"outage: {result}")
    client.close()
    return result


# ---- the run ----------------------------------------------------------------------------------


def fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def machine() -> tuple[int, str]:
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return os.cpu_count() or 0, model


def report(settings: Settings, trials: list[dict[str, Any]], down: dict[str, Any] | None) -> None:
    cpus, model = machine()
    print()
    print(f"Machine: {cpus} CPUs (`nproc`), {model}; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(
        f"Settings (defaults): job_heartbeat_seconds={settings.job_heartbeat_seconds:g}, "
        f"job_stale_seconds={settings.job_stale_seconds:g}, sweep every {max(settings.job_stale_seconds / 3, 1):g} s, "
        f"job_max_claims={settings.job_max_claims}, visibility_timeout={settings.visibility_timeout}"
    )
    print()
    print(
        "| kill -9 trial | worker queues / sweeper | ran before kill (s) | kill → requeued (s) | kill → claimed again (s) | kill → job done (s) | final state |"
    )
    print("|---|---|---|---|---|---|---|")
    for t in trials:
        sweeper = "gpu + web sweep" if t["queues"] == "gpu" else f"{t['queues']} (worker sweeps)"
        state = t.get("error") or f"{t['state']}, {t['attempts']} claims, graded once: {t['graded_once']}"
        print(
            f"| {t['trial']} | {sweeper} | {t['delay']:.0f} | {fmt(t.get('requeued'))} | {fmt(t.get('claimed'))} "
            f"| {fmt(t.get('done'))} | {state} |"
        )
    main = [t for t in trials if t["queues"] == "gpu"]
    if main:
        worst = [t.get("requeued") for t in main]
        done = [t.get("done") for t in main]
        max_requeued = None if None in worst else max(w for w in worst if w is not None)
        max_done = None if None in done else max(d for d in done if d is not None)
        print(f"| max (gpu + web sweep) | | | {fmt(max_requeued)} | | {fmt(max_done)} | |")
    if down is not None:
        print()
        print("| Redis outage | figure |")
        print("|---|---|")
        print(f"| jobs launched through the web while Redis was down | {len(down['jobs'])} of {N_OUTAGE_JOBS} |")
        print(f"| HTTP answers (launch) | {', '.join(map(str, down['statuses']))} |")
        print(f"| HTTP 5xx / errors | {down['5xx']} |")
        print(f"| launch latency, max (s) | {max(down['launch_seconds']):.1f} |")
        print(f"| job message while down | {'; '.join(repr(m) for m in down['messages'])} |")
        print(f"| jobs page while down | HTTP {down['page_status']}, shows it: {down['page_says_undelivered']} |")
        print(f"| Redis down for (s) | {fmt(down.get('outage_seconds'))} |")
        print(f"| Redis restart → every job done (s) | {fmt(down.get('done_after_restart'))} |")
        print(f"| jobs lost (never done) | {down.get('lost', '—')} ({', '.join(down.get('final_states', []))}) |")


def main() -> int:
    if shutil.which("redis-server") is None:
        print("redis-server is not installed (apt-get install redis-server)", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="rubric-reliability-"))
    database_url = f"sqlite:///{root / 'rubric.sqlite'}"
    redis = Redis(root / "redis")
    fake, fake_server = serve_fake_model()
    trials: list[dict[str, Any]] = []
    down: dict[str, Any] | None = None
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    worker: Worker | None = None
    try:
        redis.start()
        os.environ["RUBRIC_DATABASE_URL"] = database_url
        os.environ["RUBRIC_REDIS_URL"] = redis.url
        get_settings.cache_clear()
        settings = get_settings()
        upgrade(database_url)
        import_sample(root)
        with session_scope() as session:
            create_user(session, "organizer", "organizer", PASSWORD)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
        log(f"set up in {root}: redis {redis.url}, {database_url}")

        def fresh(queues: str) -> Callable[[], Worker]:
            return lambda: Worker(env, root / "worker.log", queues)

        # Extra trial: a worker on both queues sweeps by itself; no web process runs yet.
        worker = fresh("gpu,default")()
        worker.start()
        result, worker = kill_trial(0, worker, fake, TRIAL_DELAYS[0], fresh("gpu,default"))
        trials.append(result)
        worker.stop()

        web, base = start_web({**env, "RUBRIC_SECRET_KEY": WEB_SECRET}, root / "web.log")
        worker = fresh("gpu")()
        worker.start()
        for number, delay in enumerate(TRIAL_DELAYS, start=1):
            if remaining() < 150:
                log(f"skipping kill trial {number}: {remaining():.0f} s of the budget left")
                break
            result, worker = kill_trial(number, worker, fake, delay, fresh("gpu"))
            trials.append(result)
        if remaining() > 120:
            down = outage(base, redis)
        else:
            log("skipping the Redis outage: too little of the budget left")
        stop(web)
    finally:
        fake.gate.set()
        redis_processes = [p for p in PROCESSES if p.args[0] == "redis-server"]
        for process in reversed(PROCESSES):  # the web and the workers first, redis-server last
            if process not in redis_processes:
                stop(process, wait=15)
        for process in redis_processes:
            stop(process, wait=15)
        fake_server.shutdown()
        engine_for(database_url).dispose()
        report(settings, trials, down)
        clean = bool(trials) and all(t.get("state") == "done" and t.get("graded_once") for t in trials)
        clean = clean and down is not None and down["5xx"] == 0 and down.get("lost") == 0
        if clean and "--keep" not in sys.argv:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"\nlogs kept: {root} (worker.log, web.log, redis.log)")
    return 0 if clean else 1


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
