"""The FastAPI application: server-rendered pages, htmx fragments, SSE; thin routes over the services.

The web process never imports torch: grading runs in workers (or the embedded worker's threads,
which load models lazily on their first batch).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

from fastapi import Depends, FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.middleware.sessions import SessionMiddleware

from app.accounts.secret import session_secret
from app.config import get_settings
from app.jobs.launch import sweep_orphans
from app.web import errors, security, uploads
from app.web.deps import csrf_protect
from app.web.routes import analysis, auth, collections, jobs, judging, review, rubric

STATIC = Path(__file__).resolve().parents[2] / "static"
log = logging.getLogger(__name__)


@asynccontextmanager
async def _periodic_sweep(app: FastAPI) -> AsyncIterator[None]:
    """The web process requeues orphaned batches every so often, so no job hangs in "running".

    On shutdown a sweep already running is awaited, not abandoned: a sweep thread that outlived
    its app would go on to read whatever database the settings name next (another app, a test).
    """
    stale = get_settings().job_stale_seconds
    stopping = asyncio.Event()

    async def loop() -> None:
        while True:
            with suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), timeout=max(stale / 3, 1.0))
            if stopping.is_set():
                return
            try:
                await asyncio.to_thread(sweep_orphans, stale)
            except Exception:  # noqa: BLE001  a failed sweep is retried on the next tick
                log.exception("sweeping orphaned batches failed")

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        stopping.set()
        try:
            await asyncio.wait_for(task, timeout=60)
        except TimeoutError:
            log.warning("a sweep was still running at shutdown")


def create_app() -> FastAPI:
    settings = get_settings()
    app = FastAPI(
        title="Rubric Workbench",
        dependencies=[Depends(csrf_protect)],
        docs_url=None,
        redoc_url=None,
        lifespan=_periodic_sweep,
    )
    app.add_middleware(
        SessionMiddleware,
        secret_key=session_secret(settings),  # configured, or generated once into a 0600 file
        max_age=settings.session_max_age_seconds,
        session_cookie="rubric_session",
        same_site="lax",
        https_only=settings.secure_cookies,
    )
    app.add_middleware(uploads.BodyLimit)  # bounds every request body while it streams
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    for module in (auth, collections, rubric, judging, review, analysis, jobs):
        app.include_router(module.router)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:  # on the event loop: it answers even when every thread is busy
        return {"status": "ok"}

    errors.install(app)
    security.install(app)
    return app
