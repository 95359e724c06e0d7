"""Settings, read from the environment with the ``RUBRIC_`` prefix."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_database_url() -> str:
    return f"sqlite:///{Path.cwd() / 'rubric.sqlite'}"


def _cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


class Settings(BaseSettings):
    """Every knob of the workbench; override any field with ``RUBRIC_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="RUBRIC_", env_file=".env", extra="ignore")

    database_url: str = Field(default_factory=_default_database_url)
    redis_url: str | None = None
    bootstrap_samples: int = 1000
    bootstrap_seed: int = 42
    import_batch_size: int = 5000
    # Converted model weights (a de-quantised GGUF is cached here as safetensors).
    weights_cache_dir: Path = Field(default_factory=lambda: Path.home() / ".cache" / "rubric-workbench" / "models")
    # OpenAI-compatible grading backend; the key may also come from OPENAI_API_KEY.
    openai_base_url: str | None = None
    openai_api_key: str | None = None
    # Preflight: its one request waits at most this long (a dead or wrong server fails in seconds).
    openai_preflight_timeout: float = Field(default=20.0, gt=0, le=600)
    # Score mode: a grade whose answer tokens held less than this share of the next-token
    # distribution (valid_mass) is flagged in the run's summary; the grade itself is kept.
    score_min_valid_mass: float = Field(default=0.5, ge=0, le=1)
    # Jobs: a running batch writes a heartbeat every job_heartbeat_seconds, whatever its length; one
    # whose heartbeat is older than job_stale_seconds is requeued by the sweep, which runs every
    # job_stale_seconds / 3 (so a dead worker's batch is requeued within 40 s by default). A batch
    # claimed job_max_claims times (its worker died each time) is failed. A redelivered message
    # for a batch that is running with a fresh heartbeat is skipped, so the visibility timeout
    # only bounds how late a dead worker's own message comes back.
    job_heartbeat_seconds: float = Field(default=10.0, gt=0, le=3600)
    job_stale_seconds: float = Field(default=30.0, ge=1, le=86_400)
    job_max_claims: int = Field(default=3, ge=1, le=100)
    visibility_timeout: int = 3600
    # The models the web offers: {"label": "hub id, local path or API model name"}. The bundled
    # "smollm2" and "minilm" are always offered; a browser only ever names a label.
    models: dict[str, str] = Field(default_factory=dict)
    # Price table for estimates of API grading jobs: {"model": {"input_per_1k": 0.00015, "output_per_call": 0}}
    prices: dict[str, dict[str, float]] = Field(default_factory=dict)
    # Web: the session-cookie signing key. Unset, it is read from secret_file, which is created
    # (random, mode 0600) on the first start; unset too, that file lies next to the SQLite
    # database ("<db>.secret") or, for PostgreSQL, at $XDG_CONFIG_HOME/rubric-workbench/secret.
    # Every web process of one deployment must share the key (app/accounts/secret.py).
    # Then HTTPS-only cookies, and whether every rubric change needs a short reason.
    secret_key: str | None = Field(default=None, min_length=32, max_length=4096)
    secret_file: Path | None = None
    # Sessions are rows in auth_session (sign-out and a password change delete them); each lasts
    # at most session_max_age_seconds. Sign-in: after login_max_failures wrong passwords for one
    # name (or login_max_failures_per_address from one address) within login_failure_window_seconds,
    # each further failure locks that name (address) out for login_lockout_seconds, doubling up to
    # login_lockout_max_seconds; a locked-out sign-in is answered 429 with Retry-After.
    session_max_age_seconds: int = Field(default=14 * 86_400, ge=60, le=366 * 86_400)
    login_max_failures: int = Field(default=5, ge=1, le=1_000)
    login_max_failures_per_address: int = Field(default=50, ge=1, le=100_000)
    login_failure_window_seconds: float = Field(default=3_600.0, gt=0, le=30 * 86_400)
    login_lockout_seconds: float = Field(default=30.0, gt=0, le=86_400)
    login_lockout_max_seconds: float = Field(default=900.0, gt=0, le=86_400)
    secure_cookies: bool = False
    require_edit_note: bool = False
    # Uploads: the request body is refused past max_upload_mb while it streams in; each
    # compressed file is refused once it inflates past max_decompressed_mb.
    max_upload_mb: int = Field(default=512, ge=1, le=1_000_000)
    max_decompressed_mb: int = Field(default=4096, ge=1, le=10_000_000)
    # Live events: open event streams per signed-in user (one per tab); the next is refused with 429.
    max_streams_per_user: int = Field(default=16, ge=1, le=10_000)
    stream_keepalive_seconds: float = Field(default=15.0, gt=0, le=300)
    # Evaluation snapshots (docs/snapshots.md): memory kept per process across collections (the most
    # recently used one is always kept), and the persisted copies that spare a cold start the database.
    snapshot_memory_mb: int = Field(default=1024, ge=1, le=1_000_000)
    snapshot_files: bool = True
    snapshot_cache_dir: Path = Field(default_factory=lambda: _cache_home() / "rubric-workbench" / "snapshots")


@lru_cache
def get_settings() -> Settings:
    return Settings()
