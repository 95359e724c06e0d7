"""Settings, read from the environment with the ``RUBRIC_`` prefix."""

from __future__ import annotations

import secrets
from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_database_url() -> str:
    return f"sqlite:///{Path.cwd() / 'rubric.sqlite'}"


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
    # Jobs: a batch whose heartbeat is older than this is requeued by the sweep; the broker's
    # visibility timeout must exceed the longest batch.
    job_stale_seconds: float = 900.0
    visibility_timeout: int = 3600
    # Price table for estimates of API grading jobs: {"model": {"input_per_1k": 0.00015, "output_per_call": 0}}
    prices: dict[str, dict[str, float]] = Field(default_factory=dict)
    # Web: the session-cookie signing key (set it in production; the default changes on every start),
    # HTTPS-only cookies, and whether every rubric change needs a short reason.
    secret_key: str = Field(default_factory=lambda: secrets.token_hex(32))
    secure_cookies: bool = False
    require_edit_note: bool = False


@lru_cache
def get_settings() -> Settings:
    return Settings()
