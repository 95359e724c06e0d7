"""OpenAI-compatible HTTP backend (OpenAI, vLLM, llama.cpp's server, OpenRouter, …) via the ``openai`` package.

Temperature 0 and an optional seed; bounded concurrency; retry with exponential backoff and
jitter on rate limits, timeouts, connection errors and 5xx. A prompt that still fails comes back
as a ``BackendError`` for that cell: nothing is skipped silently. Once ``max_consecutive_errors``
prompts in a row failed with the same kind of error, the rest of the call is not sent (its
prompts come back as ``NotSent`` errors), so a broken server costs seconds, not hours.

Score mode reads the top ``top_logprobs`` next tokens (the largest top-k the server accepts, found
by the preflight). Grade tokens outside that top-k are unknown, not zero: the distribution is
renormalised over the grade tokens observed, and ``valid_mass`` is the mass they hold.
"""

from __future__ import annotations

import math
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

import openai

from app.config import get_settings
from app.grading import progress
from app.grading.backends.base import BackendError, ScoreResult
from app.grading.failures import NOT_SENT, ConsecutiveErrors
from app.grading.prompts import PromptMessages, Tokenizer

T = TypeVar("T")
Endpoint = Literal["chat", "completions"]
RETRYABLE = (openai.RateLimitError, openai.APITimeoutError, openai.APIConnectionError, openai.InternalServerError)
TOP_LOGPROBS = 20  # OpenAI chat's maximum; the preflight lowers it to what a server accepts
# Appended to completions-endpoint prompts: a raw completion model then answers with the grade
# as its next token (chat templates end in the assistant turn, which does the same). The trailing
# space is deliberate: current BPE vocabularies (GPT-4's cl100k and o200k, Llama 3, Qwen, SmolLM2)
# split digits from a preceding space, so after "Answer:" the next token would be a bare " ".
ANSWER_CUE = "\nAnswer: "


class OpenAIBackend:
    """A model behind an OpenAI-compatible endpoint."""

    name = "openai"
    empty_reply_is_error = True  # no text from a server is a failed request, not an answer (methods.py)

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        endpoint: Endpoint = "chat",
        max_tokens: int = 512,
        max_output_tokens: int = 64,
        seed: int | None = None,
        concurrency: int = 8,
        max_retries: int = 6,
        backoff_base: float = 1.0,
        backoff_cap: float = 60.0,
        timeout: float = 120.0,
        tokenizer: Tokenizer | None = None,
        tokenizer_ref: str = "smollm2",
        top_logprobs: int = TOP_LOGPROBS,
        max_consecutive_errors: int = 20,
    ) -> None:
        settings = get_settings()
        self.model = model
        self.base_url = base_url or settings.openai_base_url
        self.endpoint: Endpoint = endpoint
        self.max_tokens = max_tokens
        self.max_output_tokens = max_output_tokens
        self.seed = seed
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.top_logprobs = top_logprobs
        self.max_consecutive_errors = max_consecutive_errors
        self.calls = 0
        self.retries = 0
        self._tokenizer = tokenizer
        self._tokenizer_ref = tokenizer_ref
        # The SDK's own retries are off: ours are counted, jittered and capped the same way everywhere.
        self._client = openai.OpenAI(
            base_url=self.base_url,
            api_key=api_key or settings.openai_api_key or os.environ.get("OPENAI_API_KEY") or "not-needed",
            max_retries=0,
            timeout=timeout,
        )

    @property
    def tokenizer(self) -> Tokenizer:
        """Truncation needs a local tokenizer; the bundled SmolLM2 one is a byte-level BPE like GPT-2's."""
        if self._tokenizer is None:
            from app.grading.backends.hf import load_tokenizer

            self._tokenizer = load_tokenizer(self._tokenizer_ref)
        return self._tokenizer

    @property
    def max_prompt_tokens(self) -> int:
        return self.max_tokens

    @property
    def client(self) -> openai.OpenAI:
        return self._client

    @property
    def endpoint_url(self) -> str:
        """The URL the requests go to, as messages name it."""
        path = "chat/completions" if self.endpoint == "chat" else "completions"
        return f"{str(self._client.base_url).rstrip('/')}/{path}"

    def identity(self) -> dict[str, Any]:
        """What changes a grade: the server (host only: a path or key never does), model and decoding.

        ``max_tokens`` truncates the passage, so it changes the prompt; timeouts, retries and
        concurrency never change an answer and are not part of it.
        """
        identity: dict[str, Any] = {
            "backend": self.name,
            "model": self.model,
            "base_url": _host(str(self._client.base_url)),
            "endpoint": self.endpoint,
            "temperature": 0.0,
            "seed": self.seed,
            "max_tokens": self.max_tokens,
            "max_output_tokens": self.max_output_tokens,
            "top_logprobs": self.top_logprobs,
            "tokenizer": self._tokenizer_ref,
        }
        if self.endpoint == "completions":
            identity["answer_cue"] = ANSWER_CUE
        return identity

    # ---- requests ------------------------------------------------------------------------------

    def _request(
        self, prompt: PromptMessages, max_tokens: int, top_logprobs: int | None, client: openai.OpenAI | None = None
    ) -> Any:
        client = client or self._client
        common: dict[str, Any] = {"model": self.model, "temperature": 0.0, "max_tokens": max_tokens}
        if self.seed is not None:
            common["seed"] = self.seed
        if self.endpoint == "completions":
            extra = {"logprobs": top_logprobs} if top_logprobs else {}
            text = prompt.text + ANSWER_CUE
            return client.completions.create(prompt=text, **common, **extra)  # type: ignore[call-overload]
        messages: list[dict[str, str]] = [{"role": "user", "content": prompt.text}]
        if prompt.system is not None:
            messages = [{"role": "system", "content": prompt.system}, {"role": "user", "content": prompt.user or ""}]
        extra = {"logprobs": True, "top_logprobs": top_logprobs} if top_logprobs else {}
        return client.chat.completions.create(messages=messages, **common, **extra)  # type: ignore[call-overload]

    def ping(self, client: openai.OpenAI, text: str, *, top_logprobs: int | None) -> Any:
        """The preflight's request: one output token, the run's own parameters (model, seed, logprobs)."""
        return self._request(PromptMessages(text=text), 1, top_logprobs, client)

    def _with_retries(self, call: Callable[[], T]) -> T | BackendError:
        for attempt in range(self.max_retries + 1):
            try:
                return call()
            except RETRYABLE as error:
                if attempt == self.max_retries:
                    return BackendError(f"{type(error).__name__} after {attempt + 1} attempts: {error}")
                self.retries += 1
                time.sleep(min(self.backoff_cap, self.backoff_base * 2**attempt * (1 + random.random())))
            except openai.APIStatusError as error:
                status = error.status_code
                return BackendError(f"{type(error).__name__}: HTTP {status} from {self.endpoint_url}: {error}")
            except openai.APIError as error:
                return BackendError(f"{type(error).__name__}: {error}")
        raise AssertionError("unreachable")

    def _map(self, prompts: Sequence[PromptMessages], one: Callable[[PromptMessages], T]) -> list[T | BackendError]:
        """Every prompt through ``one`` with retries; after too many identical errors in a row, send no more."""
        streak = ConsecutiveErrors(self.max_consecutive_errors)
        lock = threading.Lock()
        advance = progress.tracker(len(prompts))  # taken here: the pool's threads do not see the context

        def guarded(prompt: PromptMessages) -> T | BackendError:
            with lock:
                if streak.tripped:
                    return BackendError(f"{NOT_SENT}: {streak.reason()}")
                self.calls += 1
            result = self._with_retries(lambda: one(prompt))
            error = result.error if isinstance(result, _ScoreFailure) else result
            with lock:
                streak.feed(str(error) if isinstance(error, BackendError) else None)
            advance(1)
            return result

        with ThreadPoolExecutor(max_workers=max(1, self.concurrency)) as pool:
            return list(pool.map(guarded, prompts))

    # ---- the two modes -------------------------------------------------------------------------

    def generate(self, prompts: Sequence[PromptMessages]) -> list[str | BackendError]:
        return self._map(prompts, self._generate_one)

    def _generate_one(self, prompt: PromptMessages) -> str:
        response = self._request(prompt, self.max_output_tokens, None)
        choice = response.choices[0]
        text = choice.text if self.endpoint == "completions" else choice.message.content
        return str(text or "").strip()

    def score(self, prompts: Sequence[PromptMessages], choices: Sequence[str]) -> list[ScoreResult | BackendError]:
        results = self._map(prompts, lambda p: self._score_one(p, choices))
        return [r.error if isinstance(r, _ScoreFailure) else r for r in results]

    def _score_one(self, prompt: PromptMessages, choices: Sequence[str]) -> ScoreResult | _ScoreFailure:
        response = self._request(prompt, 1, self.top_logprobs)
        top = top_logprobs_of(response.choices[0], self.endpoint)
        if top is None:
            return _ScoreFailure(BackendError("NoLogprobs: the server returned no logprobs; use --mode generate"))
        return score_from_logprobs(top, choices)


def _host(url: str) -> str:
    """``host[:port]`` of the base URL: never its path, user or password."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname or "")


class _ScoreFailure:
    def __init__(self, error: BackendError) -> None:
        self.error = error


def top_logprobs_of(choice: Any, endpoint: Endpoint) -> dict[str, float] | None:
    """The first output token's top logprobs as {token: logprob}; None when the server sent none."""
    logprobs = getattr(choice, "logprobs", None)
    if logprobs is None:
        return None
    if endpoint == "completions":
        tops = getattr(logprobs, "top_logprobs", None)
        return dict(tops[0]) if tops else None
    content = getattr(logprobs, "content", None)
    if not content:
        return None
    return {entry.token: entry.logprob for entry in content[0].top_logprobs}


def score_from_logprobs(top: dict[str, float], choices: Sequence[str]) -> ScoreResult | _ScoreFailure:
    """P(choice | a grade token was observed): the top-k distribution renormalised over grade tokens.

    Each choice sums P(token) over its spellings ("4", " 4", "Yes", " yes") among the top-k tokens.
    A choice with no spelling in the top-k is unknown, not zero, so it is left out of
    ``probabilities``; ``valid_mass`` = Σ observed P (≤ 1) says how much of the distribution the
    renormalised one stands for.
    """
    mass: dict[str, float] = {}
    for token, logprob in top.items():
        for choice in choices:
            if token.strip().lstrip("▁").lower() == choice.lower():
                mass[choice] = mass.get(choice, 0.0) + math.exp(logprob)
    total = sum(mass.values())
    if total <= 0:
        return _ScoreFailure(BackendError(f"NoAnswerToken: no answer token among the top {len(top)} logprobs"))
    ordered = {c: mass[c] / total for c in choices if c in mass}
    return ScoreResult(ordered, min(1.0, total))
