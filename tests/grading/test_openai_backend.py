"""The OpenAI-compatible backend against a real local server that serves the shipped model."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.grading.backends.base import BackendError, ScoreResult
from app.grading.backends.hf import HuggingFaceBackend
from app.grading.backends.openai_http import OpenAIBackend
from app.grading.methods import PromptGrader
from app.grading.prompts import CellInput, get_prompt_class
from tests.grading.openai_server import ServerState, serve

SELF_RATED = get_prompt_class("QuestionSelfRatedUnanswerablePromptWithChoices")
CELLS = [
    CellInput("q", "When was the Eiffel Tower built?", "The Eiffel Tower in Paris was completed in 1889."),
    CellInput("q", "Who wrote Emma?", "Jane Austen published the novel Emma in 1815."),
]


@pytest.fixture(scope="module")
def server(smollm2: HuggingFaceBackend) -> Iterator[tuple[str, ServerState]]:
    with serve(smollm2) as running:
        yield running


@pytest.fixture
def state(server: tuple[str, ServerState]) -> ServerState:
    server[1].reset()
    return server[1]


def _backend(server: tuple[str, ServerState], smollm2: HuggingFaceBackend, **options: object) -> OpenAIBackend:
    defaults: dict[str, object] = {
        "concurrency": 1,
        "backoff_base": 0.01,
        "max_tokens": 384,
        "tokenizer": smollm2.tokenizer,
    }
    return OpenAIBackend("smollm2", base_url=server[0], **{**defaults, **options})  # type: ignore[arg-type]


def test_chat_score_matches_the_local_model(
    server: tuple[str, ServerState], state: ServerState, smollm2: HuggingFaceBackend
) -> None:
    http = PromptGrader(SELF_RATED, _backend(server, smollm2), "score").grade(CELLS)
    local = PromptGrader(SELF_RATED, smollm2, "score").grade(CELLS)
    for remote, here in zip(http, local, strict=True):
        assert remote.error is None and remote.probabilities is not None and here.probabilities is not None
        assert remote.self_rating == here.self_rating
        # the server reports only its top-20 tokens, so the tail mass differs a little
        assert remote.probabilities["1"] == pytest.approx(here.probabilities["1"], abs=0.1)
        assert 0 < (remote.valid_mass or 0) <= 1


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_generate_on_both_endpoints(
    server: tuple[str, ServerState], state: ServerState, smollm2: HuggingFaceBackend, endpoint: str
) -> None:
    backend = _backend(server, smollm2, endpoint=endpoint, max_output_tokens=8)
    outcomes = PromptGrader(SELF_RATED, backend, "generate").grade(CELLS)
    assert all(o.error is None and o.raw_answer for o in outcomes)  # an empty reply would be an error
    assert all(o.self_rating is not None and 0 <= o.self_rating <= 5 for o in outcomes)
    assert backend.calls == 2


def test_rate_limits_are_retried_with_backoff(
    server: tuple[str, ServerState], state: ServerState, smollm2: HuggingFaceBackend
) -> None:
    backend = _backend(server, smollm2)
    state.faults += ["429", "429", "500"]
    before = state.requests
    results = backend.score([SELF_RATED.render(CELLS[0], smollm2.tokenizer, 384)], SELF_RATED.score_choices)
    assert isinstance(results[0], ScoreResult)
    assert backend.retries == 3 and state.requests - before == 4


def test_exhausted_retries_fail_that_prompt_only(
    server: tuple[str, ServerState], state: ServerState, smollm2: HuggingFaceBackend
) -> None:
    backend = _backend(server, smollm2, max_retries=1)
    state.faults += ["429", "429"]
    prompts = [SELF_RATED.render(c, smollm2.tokenizer, 384) for c in CELLS]
    results = backend.score(prompts, SELF_RATED.score_choices)
    assert isinstance(results[0], BackendError) and "RateLimitError after 2 attempts" in str(results[0])
    assert isinstance(results[1], ScoreResult)


def test_timeouts_are_retried(server: tuple[str, ServerState], state: ServerState, smollm2: HuggingFaceBackend) -> None:
    backend = _backend(server, smollm2, timeout=3.0, max_output_tokens=4)
    state.slow_seconds = 6.0
    state.faults.append("slow")
    results = backend.generate([SELF_RATED.render(CELLS[0], smollm2.tokenizer, 384)])
    assert isinstance(results[0], str) and backend.retries == 1


def test_a_server_without_logprobs_is_a_clear_cell_error(
    server: tuple[str, ServerState], state: ServerState, smollm2: HuggingFaceBackend
) -> None:
    state.faults.append("no-logprobs")
    outcome = PromptGrader(SELF_RATED, _backend(server, smollm2), "score").grade(CELLS[:1])[0]
    assert outcome.error is not None and "no logprobs" in outcome.error
