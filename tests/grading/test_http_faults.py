"""Grading against a misbehaving OpenAI-compatible server fails fast, says why, and never fakes a grade.

Every fault is a real behaviour of the project's local server (tests/grading/openai_server.py):
unknown model, a base URL without /v1, no logprobs, a truncated or capped top-k, empty replies, a
rejected ``seed``, slow replies, a server that breaks mid-run, and a port nothing listens on.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.cli import app
from app.grading.backends.hf import HuggingFaceBackend
from app.grading.backends.openai_http import OpenAIBackend
from app.grading.methods import PromptGrader
from app.grading.preflight import PreflightFailed, preflight
from app.models import Grade, GradeCache
from tests.conftest import Database
from tests.grading.openai_server import ServerState, dead_url, serve
from tests.grading.test_openai_backend import CELLS, SELF_RATED
from tests.helpers import cli, runner

# |E[grade | top-k] − E[grade | full vocabulary]| on a 0-5 scale for a cell that is not flagged.
TOLERANCE = 0.5
MIN_VALID_MASS = 0.5  # the default of score_min_valid_mass


@pytest.fixture(autouse=True)
def _patient_preflight(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test server runs a real model on a shared CPU: give its first answer time."""
    from app.config import get_settings

    monkeypatch.setenv("RUBRIC_OPENAI_PREFLIGHT_TIMEOUT", "300")
    get_settings.cache_clear()


@pytest.fixture(scope="module")
def server(smollm2: HuggingFaceBackend) -> Iterator[tuple[str, ServerState]]:
    with serve(smollm2) as running:
        yield running


@pytest.fixture
def url(server: tuple[str, ServerState]) -> str:
    return server[0]


@pytest.fixture
def state(server: tuple[str, ServerState]) -> Iterator[ServerState]:
    server[1].reset()
    yield server[1]
    server[1].reset()


def _backend(url: str, smollm2: HuggingFaceBackend, **options: object) -> OpenAIBackend:
    defaults: dict[str, object] = {"concurrency": 1, "backoff_base": 0.01, "max_tokens": 384}
    return OpenAIBackend("smollm2", base_url=url, tokenizer=smollm2.tokenizer, **{**defaults, **options})  # type: ignore[arg-type]


def _grade(url: str, *extra: str, expect: int = 0) -> str:
    """``rubric grade sample`` on the server, the bees query only (24 cells); returns stderr."""
    args = ["grade", "sample", "--backend", "openai", "--model", "smollm2", "--base-url", url]
    args += ["--query", "bees", "--max-tokens", "384", "--concurrency", "1", *extra]
    result = runner.invoke(app, args)
    assert result.exit_code == expect, f"exit {result.exit_code}\n{result.stderr}\n{result.exception!r}"
    return result.stderr


def _counts(db: Database) -> tuple[int, int, int]:
    """(grade rows, rows with an error, cache rows)."""
    with db.session() as session:
        messages = list(session.scalars(select(Grade.error)))  # a JSON column: no error is JSON null
        rows, errors = len(messages), sum(1 for m in messages if m)
        cached = session.scalar(select(func.count()).select_from(GradeCache)) or 0
    return rows, errors, cached


# ---- preflight: each fault fails in one request, naming the URL and what to change --------------


def test_preflight_passes_and_reports_what_it_found(url: str, state: ServerState, smollm2: HuggingFaceBackend) -> None:
    result = preflight(_backend(url, smollm2), "score", timeout=20)
    assert (result.top_logprobs, result.context_length, result.models) == (20, 8192, ("smollm2",))
    assert state.requests == 1  # one tiny request (GET /models is not a completion)


def test_an_unknown_model_fails_naming_the_url_and_the_models(
    url: str, state: ServerState, smollm2: HuggingFaceBackend
) -> None:
    backend = OpenAIBackend("gpt-4o", base_url=url, tokenizer=smollm2.tokenizer)
    with pytest.raises(PreflightFailed) as failed:
        preflight(backend, "generate", timeout=20)
    message = str(failed.value)
    assert f"{url}/chat/completions" in message and "'gpt-4o'" in message and "HTTP 404" in message
    assert "does the base URL end in /v1?" in message and "models on this server: smollm2" in message


def test_a_base_url_without_v1_gets_the_hint(url: str, state: ServerState, smollm2: HuggingFaceBackend) -> None:
    bare = url.removesuffix("/v1")
    with pytest.raises(PreflightFailed, match="does the base URL end in /v1") as failed:
        preflight(_backend(bare, smollm2), "score", timeout=20)
    assert bare in str(failed.value)


def test_a_dead_port_fails_at_once_without_retries(smollm2: HuggingFaceBackend) -> None:
    backend = _backend(dead_url(), smollm2, max_retries=6, backoff_base=60.0)  # a retry would sleep a minute
    with pytest.raises(PreflightFailed, match="cannot connect .*is the server running"):
        preflight(backend, "score", timeout=20)
    assert backend.retries == 0


def test_no_logprobs_fails_score_mode_only(url: str, state: ServerState, smollm2: HuggingFaceBackend) -> None:
    state.logprobs = False
    with pytest.raises(PreflightFailed, match="returned no logprobs .*use --mode generate"):
        preflight(_backend(url, smollm2), "score", timeout=20)
    assert preflight(_backend(url, smollm2), "generate", timeout=20).top_logprobs is None


def test_a_rejected_seed_is_named(url: str, state: ServerState, smollm2: HuggingFaceBackend) -> None:
    state.rejects = ("seed",)
    with pytest.raises(PreflightFailed, match="rejects the parameter 'seed'.*run without --seed"):
        preflight(_backend(url, smollm2, seed=7), "generate", timeout=20)
    assert preflight(_backend(url, smollm2), "generate", timeout=20).model == "smollm2"  # no seed: fine


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_the_largest_accepted_top_k_is_found_and_recorded(
    url: str, state: ServerState, smollm2: HuggingFaceBackend, endpoint: str
) -> None:
    state.max_top_logprobs = 5  # as OpenAI's legacy completions: 400 above 5
    backend = _backend(url, smollm2, endpoint=endpoint)
    from app.grading.preflight import preflight_backend

    assert preflight_backend(backend, "score") is not None
    assert backend.top_logprobs == 5 and backend.identity()["top_logprobs"] == 5
    state.max_top_logprobs, state.top_k_cap = None, 3  # a server that silently returns fewer
    assert preflight(backend, "score", timeout=20).top_logprobs == 3


def test_a_context_shorter_than_max_tokens_fails(url: str, state: ServerState, smollm2: HuggingFaceBackend) -> None:
    state.context_length = 256
    with pytest.raises(PreflightFailed, match="context of 256 tokens, less than --max-tokens 384"):
        preflight(_backend(url, smollm2), "generate", timeout=20)


def test_a_slow_server_fails_within_the_preflight_timeout(
    url: str, state: ServerState, smollm2: HuggingFaceBackend
) -> None:
    state.delay = 3.0
    with pytest.raises(PreflightFailed, match="no answer in time"):
        preflight(_backend(url, smollm2), "generate", timeout=0.5)


# ---- score mode over HTTP: missing digits are unknown mass, not zero ---------------------------


def test_a_truncated_top_k_matches_the_full_distribution_or_is_flagged(
    url: str, state: ServerState, smollm2: HuggingFaceBackend
) -> None:
    """Per cell: E[grade] from the top-3 (renormalised over the grade tokens seen) is within
    TOLERANCE of E[grade] over the whole vocabulary, or its valid_mass is below the flag threshold."""
    cells = CELLS * 1 + [CELLS[0].__class__("q", "What is the waggle dance?", "Bees dance to show where food is.")]
    state.top_k_cap = 3
    checked = 0
    for endpoint in ("chat", "completions"):
        grader = PromptGrader(SELF_RATED, _backend(url, smollm2, endpoint=endpoint), "score")
        for cell in cells:
            outcome = grader.grade([cell])[0]
            full = {d: p for d, p in state.last_full.items() if d in SELF_RATED.score_choices}
            exact = sum(int(d) * p for d, p in full.items()) / sum(full.values())
            if outcome.error is not None:  # no grade digit among the top 3: an error, never a guess
                assert outcome.error.startswith("NoAnswerToken")
                continue
            assert outcome.probabilities is not None and outcome.valid_mass is not None
            assert set(outcome.probabilities) <= set(full)  # unseen digits are left out, not set to 0
            assert outcome.valid_mass <= sum(full.values()) + 1e-6
            flagged = outcome.valid_mass < MIN_VALID_MASS
            assert flagged or abs((outcome.expected_grade or 0) - exact) <= TOLERANCE, (endpoint, outcome, exact)
            checked += 1
    assert checked >= 3


# ---- the CLI: fail fast, exit non-zero with a summary, no grade for a failed cell --------------


def test_cli_preflight_failures_exit_2_and_write_nothing(
    url: str, state: ServerState, sample_db: Database, smollm2: HuggingFaceBackend
) -> None:
    out = _grade(url, "--model", "nope", expect=2)
    assert "error:" in out and "'nope'" in out and "does the base URL end in /v1" in out
    out = _grade(dead_url(), expect=2)
    assert "cannot connect" in out
    state.logprobs = False
    assert "returned no logprobs" in _grade(url, "--mode", "score", expect=2)
    state.logprobs, state.rejects = True, ("seed",)
    assert "rejects the parameter 'seed'" in _grade(url, "--seed", "3", expect=2)
    assert _counts(sample_db) == (0, 0, 0)


def test_cli_sends_the_seed_and_records_it(url: str, state: ServerState, sample_db: Database) -> None:
    out = _grade(
        url,
        "--mode",
        "generate",
        "--seed",
        "7",
        "--max-new-tokens",
        "4",
    )
    assert "preflight ok" in out and state.seeds and set(state.seeds) == {7}
    with sample_db.session() as session:
        from app.models import Grader

        options = session.scalars(select(Grader.options)).one()
    assert options["seed"] == 7 and options["max_output_tokens"] == 4 and options["base_url"].startswith("127.0.0.1:")


def test_empty_replies_are_errors_never_cached_and_retried_on_rerun(
    url: str, state: ServerState, sample_db: Database
) -> None:
    state.empty = True
    out = _grade(url, "--mode", "generate", "--max-new-tokens", "4", "--max-consecutive-errors", "0", expect=1)
    assert "24 errors" in out and "EmptyReply ×24: EmptyReply: the model returned no text" in out
    rows, errors, cached = _counts(sample_db)
    assert (rows, errors, cached) == (24, 24, 0)
    with sample_db.session() as session:
        assert session.scalars(select(Grade.self_rating).where(Grade.self_rating.is_not(None))).first() is None
    state.empty = False
    out = _grade(url, "--mode", "generate", "--max-new-tokens", "4")
    assert "0 cached" in out and "0 errors" in out
    assert _counts(sample_db)[1] == 0


def test_fail_fast_stops_keeps_what_was_graded_and_resumes(url: str, state: ServerState, sample_db: Database) -> None:
    state.fail_after = 7  # the server answers the preflight and 6 cells, then only 500s
    out = _grade(url, "--max-retries", "0", "--max-consecutive-errors", "5", expect=1)
    assert "stopped after 5 consecutive InternalServerError errors" in out
    assert "errors by kind:" in out and "InternalServerError ×5: InternalServerError" in out
    assert "13 cells not sent" in out  # 24 cells: 6 graded, 5 failed, the rest never sent
    rows, errors, cached = _counts(sample_db)
    assert (rows, errors, cached) == (11, 5, 6)
    state.fail_after = None
    out = _grade(url)
    assert "6 cached" in out and "0 errors" in out
    assert _counts(sample_db) == (24, 0, 24)


def test_cli_flags_low_mass_score_grades(url: str, state: ServerState, sample_db: Database) -> None:
    state.top_k_cap = 2
    result = runner.invoke(
        app,
        ["grade", "sample", "--backend", "openai", "--model", "smollm2", "--base-url", url, "--query", "bees"]
        + ["--max-tokens", "384", "--concurrency", "1"],
    )
    assert result.exit_code in (0, 1), result.stderr  # cells with no digit in the top 2 are errors
    with sample_db.session() as session:
        masses = list(session.scalars(select(Grade.valid_mass).where(Grade.valid_mass.is_not(None))))
    low = sum(1 for m in masses if m < MIN_VALID_MASS)
    assert masses and ((f"flagged: {low} score grades with valid_mass < 0.5" in result.stderr) == (low > 0))


# ---- a locked SQLite database is a normal error, exit 2 -----------------------------------------


@pytest.fixture
def locked(sample_db: Database, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Another process holds SQLite's exclusive lock; the CLI waits 0.2 s for it, not 5 s."""
    from app import db

    monkeypatch.setattr(db, "SQLITE_BUSY_TIMEOUT_MS", 200)
    sample_db.engine.dispose()  # WAL's exclusive mode needs every other connection closed
    db.engine_for(sample_db.url).dispose()
    db.engine_for.cache_clear()
    holder = sqlite3.connect(sample_db.url.removeprefix("sqlite:///"), isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("UPDATE collection SET name = name")
    yield
    holder.execute("ROLLBACK")
    holder.close()
    db.engine_for.cache_clear()


@pytest.mark.usefixtures("locked")
@pytest.mark.parametrize(
    "args",
    [
        ["grade", "sample", "--query", "bees"],
        ["generate", "sample", "--query", "bees", "--backend", "openai", "--model", "smollm2", "--base-url", "URL"],
        ["import", "sample", "--queries", "QUERIES"],
        ["collections"],
        ["leaderboard", "sample", "--measure", "cover"],
    ],
    ids=["grade", "generate", "import", "collections", "leaderboard"],
)
def test_a_locked_database_is_error_exit_2(args: list[str], url: str, state: ServerState, tmp_path: Path) -> None:
    queries = tmp_path / "q.json"
    queries.write_text('{"new": "a new query"}', encoding="utf-8")
    args = [url if a == "URL" else str(queries) if a == "QUERIES" else a for a in args]
    out = cli(*args, expect=2)
    assert "error: the database is busy" in out and "Traceback" not in out


# ---- worker jobs: a failing preflight or an all-error run ends the job failed, with the reason ---


@pytest.fixture
def embedded(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.config import get_settings

    monkeypatch.delenv("RUBRIC_REDIS_URL", raising=False)
    get_settings.cache_clear()


def _job(db: Database, spec: object, batch_cells: int = 8) -> int:
    from app.collections.service import get_collection
    from app.grading.engine import CellScope
    from app.jobs.launch import launch_grading

    with db.session() as session:
        job = launch_grading(
            session,
            get_collection(session, "sample"),
            spec,  # type: ignore[arg-type]
            scope=CellScope(query_ids=frozenset({"bees"})),
            batch_cells=batch_cells,
        )
        session.commit()
        return job.id


@pytest.mark.usefixtures("embedded")
def test_a_job_whose_preflight_fails_ends_failed_with_the_hint(
    url: str, state: ServerState, sample_any_db: Database
) -> None:
    from app.grading.service import GraderSpec
    from tests.jobs.helpers import wait_job

    spec = GraderSpec(backend="openai", model="nope", base_url=url, mode="generate", max_tokens=384)
    job = wait_job(sample_any_db, _job(sample_any_db, spec), 300)
    assert job.state == "failed" and job.message.startswith("preflight failed: ") and "'nope'" in job.message
    assert "does the base URL end in /v1" in job.message
    assert _counts(sample_any_db) == (0, 0, 0)


@pytest.mark.usefixtures("embedded")
def test_a_job_of_empty_replies_stops_failed_with_the_summary(
    url: str, state: ServerState, sample_any_db: Database
) -> None:
    from app.grading.service import GraderSpec
    from tests.jobs.helpers import wait_job

    state.empty = True
    spec = GraderSpec(
        backend="openai",
        model="smollm2",
        base_url=url,
        mode="generate",
        max_tokens=384,
        max_new_tokens=2,
        concurrency=1,
        max_consecutive_errors=12,
    )
    job = wait_job(sample_any_db, _job(sample_any_db, spec), 600)
    assert job.state == "failed", job.message
    rows, errors, cached = _counts(sample_any_db)
    assert rows == errors and cached == 0
    # Batches may run side by side (PostgreSQL): all three can finish before one sees the streak.
    if rows == 16:  # two batches of 8, then the stop; the third never ran
        assert job.message.startswith("stopped after 16 consecutive EmptyReply errors: EmptyReply: the model"), (
            job.message
        )
    else:
        assert (
            rows == 24
            and job.message == "24 of 24 cells failed: EmptyReply ×24: EmptyReply: the model returned no text"
        )
