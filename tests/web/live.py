"""A real uvicorn server in a subprocess, and signed-in HTTP clients for it (tests that need true concurrency)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from app.accounts.service import create_user
from app.db import session_scope
from tests.conftest import REPO, Database, _free_port
from tests.grading.conftest import import_sample
from tests.jobs.helpers import launch, wait_job

LIVE_PASSWORD = "live-test-Password-2718"


def prepare_sample(database: Database, tmp_path: Path, users: dict[str, str]) -> None:
    """The sample collection graded by the default grader, and one user per ``name: role``."""
    import_sample(tmp_path)
    wait_job(database, launch(database))
    with session_scope() as session:
        for name, role in users.items():
            create_user(session, name, role, LIVE_PASSWORD)


@contextmanager
def live_server(database: Database, **env: str) -> Iterator[str]:
    """Serve the app on a free loopback port against ``database``; yields the base URL."""
    port = _free_port()
    environment = {
        **os.environ,
        "RUBRIC_DATABASE_URL": database.url,
        "RUBRIC_SECRET_KEY": "live-test-secret-key-0123456789abcdef",
        **env,
    }
    environment.pop("RUBRIC_REDIS_URL", None) if "RUBRIC_REDIS_URL" not in env else None
    command = [sys.executable, "-m", "uvicorn", "app.web.main:create_app", "--factory", "--host", "127.0.0.1"]
    process = subprocess.Popen(
        [*command, "--port", str(port), "--log-level", "warning"],
        cwd=REPO,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(base, process)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()


def _wait_healthy(base: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited: {process.stderr.read().decode() if process.stderr else ''}")
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("server did not become healthy in 60 s")


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf-token" content="([^"]+)"', html)
    assert match, "page has no CSRF token"
    return match.group(1)


def signed_in(base: str, name: str, password: str = LIVE_PASSWORD) -> httpx.Client:
    """A client with its own session cookie and the session's CSRF token as a default header."""
    client = httpx.Client(base_url=base, timeout=60)
    token = csrf_of(client.get("/login").text)
    response = client.post("/login", data={"name": name, "password": password, "csrf_token": token})
    assert response.status_code == 303, response.text
    client.headers["X-CSRF-Token"] = csrf_of(client.get("/").text)
    return client
