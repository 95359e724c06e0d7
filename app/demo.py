"""`rubric demo`: a self-contained SQLite workbench with the sample collection, graded in embedded mode."""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import select

from app.accounts.service import create_user
from app.collections.importing import ImportFiles, import_files
from app.collections.service import ensure_collection, import_interchange, import_official, import_queries
from app.config import get_settings
from app.db import engine_for, session_scope
from app.grading.service import GraderSpec
from app.jobs.launch import launch_grading, wait_until_finished
from app.migrate import upgrade
from app.models import Collection, User
from app.rubrics.service import import_banks
from app.samples import NAME, write_sample
from app.samples.rag import RAG_NAME, write_rag_sample

DEMO_ACCOUNTS = (  # passwords pass app/accounts/passwords.py (10+, not containing the name)
    ("viewer", "viewer", "demo-reads-only"),
    ("judge", "judge", "demo-grades-cells"),
    ("organizer", "organizer", "demo-runs-the-show"),
)


def prepare_demo(directory: Path) -> list[tuple[str, str, str]]:
    """Create (or reuse) the demo database, import and grade the sample, create the accounts."""
    directory.mkdir(parents=True, exist_ok=True)
    os.environ["RUBRIC_DATABASE_URL"] = f"sqlite:///{directory.resolve() / 'demo.sqlite'}"
    os.environ.pop("RUBRIC_REDIS_URL", None)  # embedded mode: no services needed
    # No derived key: the web app creates a random one in demo.sqlite.secret (0600) on first start.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    get_settings.cache_clear()
    engine_for.cache_clear()
    upgrade(get_settings().database_url)
    with session_scope() as session:
        if session.scalar(select(Collection).where(Collection.name == NAME)) is None:
            files = write_sample(directory / "sample")
            collection = ensure_collection(session, NAME)
            import_queries(session, collection, files.queries)
            import_interchange(session, collection, files.passages)
            import_banks(session, collection, [files.bank])
            import_official(session, collection, files.official)
        if session.scalar(select(Collection).where(Collection.name == RAG_NAME)) is None:
            import_files(session, ensure_collection(session, RAG_NAME), _rag_files(directory / "rag-sample"))
        for name, role, password in DEMO_ACCOUNTS:
            if session.scalar(select(User).where(User.name == name)) is None:
                create_user(session, name, role, password)
    _grade_sample()
    return [(name, role, password) for name, role, password in DEMO_ACCOUNTS]


def _rag_files(directory: Path) -> ImportFiles:
    """The RAG sample (app/samples/rag.py) as one import: topics, nuggets, reports, a second judge, ranks."""
    rag = write_rag_sample(directory)
    files = ImportFiles(requests=[rag.requests], nuggets=[rag.nuggets], reports=[rag.reports], official=[rag.official])
    files.judgments_from = [("umbrela", rag.umbrela)]
    return files


def _grade_sample() -> None:
    # the passage sample's questions, and the RAG sample's nuggets (offline similarity graders)
    for name, spec in ((NAME, GraderSpec()), (RAG_NAME, GraderSpec(prompt_class="NuggetSimilarity"))):
        with session_scope() as session:
            collection = session.scalars(select(Collection).where(Collection.name == name)).one()
            job = launch_grading(session, collection, spec, launched_by="demo")
            job_id = job.id  # the batches start when this block commits
        wait_until_finished(job_id)
