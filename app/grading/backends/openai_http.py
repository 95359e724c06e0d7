"""OpenAI-compatible HTTP backend (OpenAI, vLLM, llama.cpp's server, OpenRouter, …) via the ``openai`` package.

Temperature 0 and an optional seed; bounded concurrency; retry with exponential backoff and
jitter on rate limits, timeouts, connection errors and 5xx. A prompt that still fails comes back
as a ``BackendError`` for that cell: nothing is skipped silently.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, TypeVar

import openai

from app.config import get_settings
from app.grading.backends.base import BackendError, ScoreResult
from app.grading.prompts import PromptMessages, Tokenizer

T = TypeVar("T")
Endpoint = Literal["chat", "completions"]
RETRYABLE = (openai.RateLimitError, openai.APITimeoutError, openai.APIConnectionError, openai.InternalServerError)
TOP_LOGPROBS = 20


class OpenAIBackend:
    """A model behind an OpenAI-compatible endpoint."""

    name = "openai"

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

    def identity(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "model": self.model,
            "base_url": self.base_url,
            "endpoint": self.endpoint,
            "temperature": 0.0,
            "seed": self.seed,
            "max_tokens": self.max_tokens,
            "max_output_tokens": self.max_output_tokens,
            "tokenizer": self._tokenizer_ref,
        }

    # ---- requests ------------------------------------------------------------------------------

    def _request(self, prompt: PromptMessages, max_tokens: int, logprobs: bool) -> Any:
        common: dict[str, Any] = {"model": self.model, "temperature": 0.0, "max_tokens": max_tokens}
        if self.seed is not None:
            common["seed"] = self.seed
        if self.endpoint == "completions":
            extra = {"logprobs": TOP_LOGPROBS} if logprobs else {}
            return self._client.completions.create(prompt=prompt.text, **common, **extra)  # type: ignore[call-overload]
        messages: list[dict[str, str]] = [{"role": "user", "content": prompt.text}]
        if prompt.system is not None:
            messages = [{"role": "system", "content": prompt.system}, {"role": "user", "content": prompt.user or ""}]
        extra = {"logprobs": True, "top_logprobs": TOP_LOGPROBS} if logprobs else {}
        return self._client.chat.completions.create(messages=messages, **common, **extra)  # type: ignore[call-overload]

    def _with_retries(self, call: Callable[[], T]) -> T | BackendError:
        for attempt in range(self.max_retries + 1):
            try:
                return call()
            except RETRYABLE as error:
                if attempt == self.max_retries:
                    return BackendError(f"{type(error).__name__} after {attempt + 1} attempts: {error}")
                self.retries += 1
                time.sleep(min(self.backoff_cap, self.backoff_base * 2**attempt * (1 + random.random())))
            except openai.APIError as error:
                return BackendError(f"{type(error).__name__}: {error}")
        raise AssertionError("unreachable")

    def _map(self, prompts: Sequence[PromptMessages], one: Callable[[PromptMessages], T]) -> list[T | BackendError]:
        self.calls += len(prompts)
        with ThreadPoolExecutor(max_workers=max(1, self.concurrency)) as pool:
            return list(pool.map(lambda p: self._with_retries(lambda: one(p)), prompts))

    # ---- the two modes -------------------------------------------------------------------------

    def generate(self, prompts: Sequence[PromptMessages]) -> list[str | BackendError]:
        return self._map(prompts, self._generate_one)

    def _generate_one(self, prompt: PromptMessages) -> str:
        response = self._request(prompt, self.max_output_tokens, logprobs=False)
        choice = response.choices[0]
        text = choice.text if self.endpoint == "completions" else choice.message.content
        return str(text or "").strip()

    def score(self, prompts: Sequence[PromptMessages], choices: Sequence[str]) -> list[ScoreResult | BackendError]:
        results = self._map(prompts, lambda p: self._score_one(p, choices))
        return [r.error if isinstance(r, _ScoreFailure) else r for r in results]

    def _score_one(self, prompt: PromptMessages, choices: Sequence[str]) -> ScoreResult | _ScoreFailure:
        response = self._request(prompt, 1, logprobs=True)
        top = _top_logprobs(response.choices[0], self.endpoint)
        if top is None:
            return _ScoreFailure(BackendError("the server returned no logprobs; use --mode generate"))
        return score_from_logprobs(top, choices)


class _ScoreFailure:
    def __init__(self, error: BackendError) -> None:
        self.error = error


def _top_logprobs(choice: Any, endpoint: Endpoint) -> dict[str, float] | None:
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
    """Sum P(token) over each choice's spellings ("4", " 4", "Yes", " yes") among the top logprobs."""
    mass = {choice: 0.0 for choice in choices}
    for token, logprob in top.items():
        for choice in choices:
            if token.strip().lstrip("▁").lower() == choice.lower():
                mass[choice] += math.exp(logprob)
    total = sum(mass.values())
    if total <= 0:
        return _ScoreFailure(BackendError(f"no answer token among the top {TOP_LOGPROBS} logprobs"))
    return ScoreResult({c: m / total for c, m in mass.items()}, total)
