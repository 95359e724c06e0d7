"""Jobs always end: refused deliveries, dead workers, drafting jobs, invalid specs, claim caps, no
write lock across model calls, and a model allowlist for the web.

The slow model is a real OpenAI-compatible HTTP server on a loopback port whose answers wait on a
gate the test opens, so a batch is "mid-flight" by construction, not by timing.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from app.collections.service import get_collection
from app.config import Settings, get_settings
from app.db import session_scope
from app.errors import Invalid
from app.grading.engine import CellScope
from app.grading.service import GraderSpec
from app.jobs import service
from app.jobs.embedded import embedded_worker
from app.jobs.launch import launch_grading, sweep_orphans
from app.models import Grade, Job, JobBatch
from tests.conftest import Database, RedisServer, _free_port
from tests.grading.conftest import import_sample
from tests.jobs.helpers import job_row, wait_for, wait_job
from tests.jobs.test_celery import Worker
from tests.web.conftest import client, login, web_db  # noqa: F401  fixtures used below

BEES = CellScope(query_ids=frozenset({"bees"}))
DRAFT = '{"questions": ["How do honey bees tell each other where flowers are?", "What is a waggle dance?"]}'


# ---- a gated OpenAI-compatible server -----------------------------------------------------------


@dataclass
class FakeModel:
    url: str
    gate: threading.Event = field(default_factory=threading.Event)
    waiting: int = 0  # requests held at the gate right now
    lock: threading.Lock = field(default_factory=threading.Lock)

    def grader(self) -> GraderSpec:
        return GraderSpec(backend="openai", model="fake-grader", mode="generate", base_url=self.url, concurrency=16)

    def drafter(self) -> GraderSpec:
        return GraderSpec(backend="openai", model="fake-drafter", base_url=self.url, max_new_tokens=512)


def _handler(model: FakeModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802  (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            preflight = body.get("max_tokens") == 1  # the one-token preflight request is never held
            with model.lock:
                model.waiting += 0 if preflight else 1
            if not preflight:
                model.gate.wait(60)
            with model.lock:
                model.waiting -= 0 if preflight else 1
            content = DRAFT if body["model"] == "fake-drafter" else "3"
            reply = {
                "id": "t",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            }
            data = json.dumps(reply).encode()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client (a killed worker) is gone
                pass

        def log_message(self, *_: Any) -> None:
            pass

    return Handler


@pytest.fixture
def fake_model() -> Iterator[FakeModel]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(FakeModel("")))
    model = FakeModel(f"http://127.0.0.1:{server.server_address[1]}/v1")
    server.RequestHandlerClass = _handler(model)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield model
    model.gate.set()
    server.shutdown()


@pytest.fixture(autouse=True)
def _embedded_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUBRIC_REDIS_URL", raising=False)
    get_settings.cache_clear()


def _settings(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    for name, value in values.items():
        monkeypatch.setenv(f"RUBRIC_{name.upper()}", value)
    get_settings.cache_clear()


@pytest.fixture
def sample(database: Database, tmp_path: Path) -> Database:
    import_sample(tmp_path)
    return database


def _launch(db: Database, spec: GraderSpec = GraderSpec(), batch_cells: int = 100, scope: CellScope = BEES) -> int:
    with db.session() as session:
        job = launch_grading(session, get_collection(session, "sample"), spec, scope=scope, batch_cells=batch_cells)
        session.commit()  # the dispatch runs here, after the commit
        return job.id


def _batches(db: Database, job_id: int) -> list[JobBatch]:
    with db.session() as session:
        rows = list(session.scalars(select(JobBatch).where(JobBatch.job_pk == job_id).order_by(JobBatch.number)))
        session.expunge_all()
        return rows


def _every_cell_graded_once(db: Database, job_id: int) -> None:
    job = job_row(db, job_id)
    with db.session() as session:
        rows = session.scalar(select(func.count()).select_from(Grade))
        distinct = session.scalar(
            select(func.count()).select_from(select(Grade.pool_entry_pk, Grade.item_id).distinct().subquery())
        )
    assert (job.state, job.done, job.errors) == ("done", job.total, 0)
    assert rows == distinct == job.total


# ---- settings ---------------------------------------------------------------------------------


def test_default_settings_requeue_a_dead_workers_batch_within_60_seconds() -> None:
    defaults = Settings(_env_file=None)  # type: ignore[call-arg]
    sweep_period = defaults.job_stale_seconds / 3  # app/web/main.py and worker/celery_app.py
    assert defaults.job_stale_seconds + sweep_period <= 60
    assert defaults.job_heartbeat_seconds * 2 < defaults.job_stale_seconds  # a missed beat is tolerated


# ---- Redis down at launch; a killed worker -----------------------------------------------------


def test_launch_with_redis_down_is_recorded_then_delivered_by_the_sweep(
    sample: Database, redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _settings(monkeypatch, redis_url=redis_server.url, job_stale_seconds="3", visibility_timeout="30")
    redis_server.stop()
    job_id = _launch(sample)  # committed; the refused dispatch raises nothing
    job = job_row(sample, job_id)
    assert (job.state, job.message) == ("queued", service.UNDELIVERED)
    assert sweep_orphans() == [b.id for b in _batches(sample, job_id)]  # retried, still refused
    assert job_row(sample, job_id).message == service.UNDELIVERED
    redis_server.start()
    worker = Worker({**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}, tmp_path / "worker.log")
    worker.start()
    try:
        wait_for(lambda: bool(sweep_orphans()) or job_row(sample, job_id).state != "queued", 30, "a delivery")
        assert job_row(sample, job_id).message == ""
        wait_job(sample, job_id, 120)
        _every_cell_graded_once(sample, job_id)
    finally:
        worker.stop()


def test_a_killed_workers_batch_is_requeued_within_60_seconds_whatever_its_length(
    sample: Database,
    redis_server: RedisServer,
    fake_model: FakeModel,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stale = 3.0
    _settings(
        monkeypatch,
        redis_url=redis_server.url,
        job_stale_seconds=str(stale),
        job_heartbeat_seconds="0.5",
        visibility_timeout="30",
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    worker = Worker(env, tmp_path / "worker.log")
    worker.start()
    try:
        job_id = _launch(sample, fake_model.grader())
        wait_for(lambda: fake_model.waiting > 0, 60, "the batch's model calls")
        time.sleep(stale + 1)  # longer than the stale threshold: only the heartbeat keeps it alive
        assert sweep_orphans() == []
        worker.kill()
        killed = time.monotonic()
        wait_for(lambda: bool(sweep_orphans()), 60, "the orphaned batch to be requeued")
        assert time.monotonic() - killed <= 60  # the bound
        fake_model.gate.set()
        worker.start()
        wait_job(sample, job_id, 120)
        _every_cell_graded_once(sample, job_id)
        assert _batches(sample, job_id)[0].attempts == 2
    finally:
        fake_model.gate.set()
        worker.stop()


# ---- drafting jobs -----------------------------------------------------------------------------


def test_a_drafting_job_whose_worker_died_is_swept_and_finishes(
    sample: Database, fake_model: FakeModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    _settings(monkeypatch, redis_url=f"redis://127.0.0.1:{_free_port()}/0", job_stale_seconds="1")
    with sample.session() as session:
        job = service.launch_generation(
            session,
            get_collection(session, "sample"),
            fake_model.drafter(),
            kind="questions",
            style="dl",
            query_ids=["bees"],
            launched_by="judge",
        )
        session.commit()  # no broker: recorded, not raised
        job_id = job.id
    assert job_row(sample, job_id).message == service.UNDELIVERED
    with sample.session() as session:  # a worker claims it, then dies before its first heartbeat
        batch = service._claim(session, _batches(sample, job_id)[0].id)
        session.commit()
        assert batch is not None
    assert job_row(sample, job_id).state == "running"
    monkeypatch.delenv("RUBRIC_REDIS_URL")  # embedded mode from here on
    get_settings.cache_clear()
    fake_model.gate.set()
    wait_for(lambda: bool(sweep_orphans()), 10, "the drafting job to be swept")
    job = wait_job(sample, job_id, 60)
    assert job.state == "done" and job.message.startswith("draft version 2: 2 items"), job.message
    assert _batches(sample, job_id)[0].attempts == 2


def test_embedded_drafting_never_blocks_grading(sample: Database, fake_model: FakeModel) -> None:
    assert get_settings().redis_url is None
    with sample.session() as session:
        drafting = service.launch_generation(
            session,
            get_collection(session, "sample"),
            fake_model.drafter(),
            kind="questions",
            style="dl",
            query_ids=["bees"],
            launched_by="judge",
        )
        session.commit()
        drafting_id = drafting.id
    wait_for(lambda: fake_model.waiting > 0, 60, "the drafting model call")
    grading_id = _launch(sample, GraderSpec())  # similarity, on the grading thread
    assert wait_job(sample, grading_id, 120).state == "done"
    assert job_row(sample, drafting_id).state == "running"  # still waiting on its model
    fake_model.gate.set()
    assert wait_job(sample, drafting_id, 60).state == "done"


# ---- invalid specs, unbuildable methods, claim caps -------------------------------------------

FREE_TEXT_SCORE = GraderSpec(backend="hf", model="smollm2", prompt_class="QuestionBriefWithAnswerKey", mode="score")


def test_an_invalid_spec_is_refused_at_launch_naming_the_field(sample: Database) -> None:
    with sample.session() as session:
        collection = get_collection(session, "sample")
        with pytest.raises(Invalid, match="^mode: QuestionBriefWithAnswerKey answers in free text"):
            launch_grading(session, collection, FREE_TEXT_SCORE)
        with pytest.raises(Invalid, match="^prompt_class: unknown"):
            launch_grading(session, collection, GraderSpec(backend="hf", prompt_class="NoSuchClass"))
        assert session.scalar(select(func.count()).select_from(Job)) == 0


def _unreachable_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing runs the batches by itself: the test plays the worker."""
    _settings(monkeypatch, redis_url=f"redis://127.0.0.1:{_free_port()}/0", job_max_claims="2")


def test_a_batch_whose_grader_cannot_be_built_fails_with_the_reason(
    sample: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    _unreachable_broker(monkeypatch)
    job_id = _launch(sample)
    with sample.session() as session:  # a spec stored before validation existed
        session.get_one(Job, job_id).params = {"grader": FREE_TEXT_SCORE.as_dict(), "rubric_version": None}
        session.commit()
    with session_scope() as session:
        job = service.execute_batch(session, _batches(sample, job_id)[0].id)
        assert job is not None and job.state == "failed"
    job = job_row(sample, job_id)
    assert "the grader cannot be built: Invalid: mode: QuestionBriefWithAnswerKey answers in free text" in job.message
    assert _batches(sample, job_id)[0].error in job.message


def test_claims_are_capped_then_the_job_fails(sample: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    _unreachable_broker(monkeypatch)
    job_id = _launch(sample)
    batch_id = _batches(sample, job_id)[0].id
    for _dead_worker in range(2):  # claimed, then the worker died: the heartbeat went stale
        with session_scope() as session:
            assert service._claim(session, batch_id) is not None
        with session_scope() as session:
            old = datetime.now(UTC) - timedelta(hours=1)
            session.execute(update(JobBatch).where(JobBatch.id == batch_id).values(heartbeat_at=old))
    with session_scope() as session:
        job = service.execute_batch(session, batch_id)
        assert job is not None and job.state == "failed"
    job = job_row(sample, job_id)
    assert job.message.startswith("batch 0: gave up after 2 claims")
    assert _batches(sample, job_id)[0].state == "failed"
    assert sweep_orphans() == []  # a failed job is never requeued


def test_a_duplicate_delivery_of_a_live_batch_is_skipped(sample: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    _unreachable_broker(monkeypatch)
    batch_id = _batches(sample, _launch(sample))[0].id
    with session_scope() as session:
        assert service._claim(session, batch_id) is not None
    with session_scope() as session:  # the broker redelivers while the first worker is alive
        assert service.execute_batch(session, batch_id) is None
    with sample.session() as session:
        assert session.get_one(JobBatch, batch_id).attempts == 1


# ---- web: no lock across model calls, validation, the model allowlist --------------------------


def test_cancel_and_override_answer_within_a_second_while_the_model_runs(
    client: TestClient,  # noqa: F811
    web_db: Database,  # noqa: F811
    fake_model: FakeModel,
) -> None:
    token = login(client, "organizer")
    job_id = _launch(web_db, fake_model.grader(), batch_cells=4)  # a new grader: its row is written too
    wait_for(lambda: fake_model.waiting > 0, 60, "the model calls")
    with web_db.session() as session:
        entry, item = session.execute(select(Grade.pool_entry_pk, Grade.item_id).limit(1)).one()
    seconds = []
    for rating in range(5):
        start = time.perf_counter()
        form = {"pool_entry": str(entry), "item_id": item, "rating": str(rating), "csrf_token": token}
        response = client.post("/c/sample/override", data=form)
        seconds.append(time.perf_counter() - start)
        assert response.status_code == 200, response.text
    start = time.perf_counter()
    response = client.post(f"/jobs/{job_id}/cancel", data={"csrf_token": token}, follow_redirects=False)
    seconds.append(time.perf_counter() - start)
    assert response.status_code == 303 and job_row(web_db, job_id).state == "cancelled"
    assert fake_model.waiting > 0  # all of it while the model was still busy
    assert max(seconds) < 1.0, seconds
    fake_model.gate.set()
    wait_for(embedded_worker().idle, 60, "the running batch to end")
    states = [b.state for b in _batches(web_db, job_id)]
    assert states[0] == "done" and set(states[1:]) <= {"cancelled"}


def test_estimate_and_launch_refuse_an_invalid_spec_with_400(client: TestClient) -> None:  # noqa: F811
    token = login(client, "organizer")
    form = {"backend": "hf", "prompt_class": "QuestionBriefWithAnswerKey", "mode": "score", "csrf_token": token}
    for path in ("/c/sample/jobs/estimate", "/c/sample/jobs"):
        response = client.post(path, data=form, follow_redirects=False)
        assert response.status_code == 400 and "mode: QuestionBriefWithAnswerKey" in response.text, path


def test_the_web_offers_only_configured_models_and_never_opens_a_path(
    web_db: Database,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = tmp_path / "id_rsa.gguf"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----")
    _settings(monkeypatch, models=json.dumps({"tiny": str(tmp_path / "missing.gguf")}))
    with TestClient(__import__("app.web.main", fromlist=["create_app"]).create_app()) as web:
        token = login(web, "organizer")
        page = web.get("/c/sample/jobs").text
        assert "<option>tiny</option>" in page and "<option>smollm2</option>" in page
        assert str(tmp_path) not in page
        with web_db.session() as session:
            before = session.scalar(select(func.count()).select_from(Job))
        for model in (str(secret), "/etc/passwd"):
            for path, form in (
                ("/c/sample/generate", {"query_id": "bees", "model": model}),
                ("/c/sample/jobs/estimate", {"backend": "hf", "model": model}),
                ("/c/sample/jobs", {"backend": "hf", "model": model}),
            ):
                response = web.post(path, data={**form, "csrf_token": token}, follow_redirects=False)
                assert response.status_code == 400 and "is not a configured model" in response.text, path
                assert "PRIVATE KEY" not in response.text and "root:" not in response.text
        response = web.post(
            "/c/sample/generate",
            data={"query_id": "bees", "model": "tiny", "csrf_token": token},
            follow_redirects=False,
        )
        assert response.status_code == 400 and "tiny&#39; was not found" in response.text
        assert "missing.gguf" not in response.text  # the label, never the path
        with web_db.session() as session:
            assert session.scalar(select(func.count()).select_from(Job)) == before
