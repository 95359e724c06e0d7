"""Job fixtures: the sample collection in a fresh database, with the per-process model cache reset."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.jobs.service import _method
from tests.conftest import Database
from tests.grading.conftest import import_sample


@pytest.fixture
def sample_db(sqlite_db: Database, tmp_path: Path) -> Database:
    import_sample(tmp_path)
    return sqlite_db


@pytest.fixture(autouse=True)
def _fresh_methods() -> None:
    _method.cache_clear()  # a test's embedded worker must not reuse another test's method counters
