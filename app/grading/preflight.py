"""Preflight: one tiny request to an OpenAI-compatible server before a run sends it every cell.

It checks, within seconds, what would otherwise fail every cell after minutes of retries: the
server answers at the base URL, knows the model, accepts the parameters the run sends (``seed``,
``logprobs``), returns logprobs in score mode (and how many: the largest top-k it accepts), and
whether its context window holds ``--max-tokens``. A failure is a ``PreflightFailed`` naming the
URL and a hint; other backends need no preflight.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import openai

from app.errors import Unavailable

if TYPE_CHECKING:
    from app.grading.backends.openai_http import OpenAIBackend
    from app.grading.methods import Mode

TOP_K_TRIES = (20, 5, 1)  # OpenAI: chat top_logprobs ≤ 20, legacy completions logprobs ≤ 5
PING = "Reply with the single digit 1."
_CONTEXT_KEYS = ("max_model_len", "context_length", "context_window", "max_context_length", "n_ctx")


class PreflightFailed(Unavailable):
    """The server cannot run this grader as configured; the message names the URL and what to change."""


@dataclass(frozen=True, slots=True)
class PreflightResult:
    url: str
    model: str
    endpoint: str
    top_logprobs: int | None  # the largest top-k the server accepted (score mode), else None
    context_length: int | None  # as the server reports it in /models; None: unknown
    models: tuple[str, ...] = ()  # what GET /models lists (may be empty: not every server has it)
    notes: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        context = f"context {self.context_length} tokens" if self.context_length else "context length unknown"
        top = f", top-{self.top_logprobs} logprobs" if self.top_logprobs else ""
        return f"preflight ok: {self.model} at {self.url} ({self.endpoint}{top}, {context})"


def preflight(backend: OpenAIBackend, mode: Mode, *, timeout: float) -> PreflightResult:
    """Check the server with one short request (two or three when it refuses a top-k); no retries."""
    url = backend.endpoint_url
    client = backend.client.with_options(timeout=timeout, max_retries=0)
    models, context = _list_models(client, backend.model)
    top_k: int | None = None
    tries: tuple[int | None, ...] = TOP_K_TRIES if mode == "score" else (None,)
    for index, k in enumerate(tries):
        try:
            response = backend.ping(client, PING, top_logprobs=k)
        except openai.BadRequestError as error:
            rejected = _rejected_parameter(error)
            if rejected == "logprobs" and index + 1 < len(tries):
                continue  # the server caps top-k below k: try the next smaller one
            raise _failed(url, backend, error, models) from None
        except openai.APIError as error:
            raise _failed(url, backend, error, models) from None
        if k is not None:
            top_k = _check_logprobs(url, backend, response, k)
        break
    if context is not None and context < backend.max_tokens:
        raise PreflightFailed(
            f"{url}: the model {backend.model!r} has a context of {context} tokens, less than --max-tokens "
            f"{backend.max_tokens}; lower --max-tokens"
        )
    return PreflightResult(url, backend.model, backend.endpoint, top_k, context, models)


def _list_models(client: openai.OpenAI, model: str) -> tuple[tuple[str, ...], int | None]:
    """GET /models: the ids it lists and the model's context length when the server reports one."""
    try:
        page = client.models.list()
    except (openai.APIError, httpx.HTTPError):
        return (), None  # not every server lists its models; the POST below decides
    entries = list(page.data)
    ids = tuple(str(m.id) for m in entries)
    for entry in entries:
        if entry.id == model:
            return ids, _context_length(entry.model_dump())
    return ids, None


def _context_length(entry: dict[str, Any]) -> int | None:
    """vLLM: ``max_model_len``; OpenRouter: ``context_length``; llama.cpp: ``meta.n_ctx_train``."""
    for source in (entry, entry.get("meta") or {}):
        for key in (*_CONTEXT_KEYS, "n_ctx_train"):
            value = source.get(key)
            if isinstance(value, int) and value > 0:
                return value
    return None


def _check_logprobs(url: str, backend: OpenAIBackend, response: Any, asked: int) -> int:
    from app.grading.backends.openai_http import top_logprobs_of

    top = top_logprobs_of(response.choices[0], backend.endpoint)
    if not top:
        raise PreflightFailed(
            f"{url}: the server returned no logprobs for {backend.model!r}, which score mode needs; "
            "use --mode generate (or a server that returns logprobs)"
        )
    return min(asked, len(top))  # a server that silently caps top-k returns fewer than asked


def _rejected_parameter(error: openai.APIStatusError) -> str | None:
    text = str(error).lower()
    for name in ("top_logprobs", "logprobs", "seed"):
        if name in text:
            return "logprobs" if "logprobs" in name else name
    return None


def _failed(url: str, backend: OpenAIBackend, error: openai.APIError, models: tuple[str, ...]) -> PreflightFailed:
    if isinstance(error, openai.APIConnectionError | openai.APITimeoutError):
        what = "no answer in time" if isinstance(error, openai.APITimeoutError) else "cannot connect"
        return PreflightFailed(f"{url}: {what} ({type(error).__name__}); is the server running at --base-url?")
    status = getattr(error, "status_code", None)
    detail = _detail(error)
    if status == 404:
        listed = f"; models on this server: {', '.join(models[:20])}" if models else ""
        return PreflightFailed(
            f"{url}: HTTP 404 for model {backend.model!r} ({detail}); is the model name right, "
            f"and does the base URL end in /v1?{listed}"
        )
    if status in (401, 403):
        return PreflightFailed(f"{url}: HTTP {status} ({detail}); set RUBRIC_OPENAI_API_KEY or OPENAI_API_KEY")
    rejected = _rejected_parameter(error) if isinstance(error, openai.BadRequestError) else None
    if rejected == "seed":
        return PreflightFailed(f"{url}: the server rejects the parameter 'seed' ({detail}); run without --seed")
    if rejected == "logprobs":
        return PreflightFailed(f"{url}: the server rejects the parameter 'logprobs' ({detail}); use --mode generate")
    return PreflightFailed(f"{url}: HTTP {status} {type(error).__name__} ({detail})")


def _detail(error: openai.APIError) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        message = body.get("message") or body.get("detail") or (body.get("error") or {}).get("message")
        if message:
            return " ".join(str(message).split())[:200]
    return " ".join(str(error).split())[:200]


def preflight_backend(backend: object, mode: Mode) -> PreflightResult | None:
    """Preflight an OpenAI-compatible backend and set the top-k it found; other backends need none."""
    from app.config import get_settings
    from app.grading.backends.openai_http import OpenAIBackend

    if not isinstance(backend, OpenAIBackend):
        return None
    result = preflight(backend, mode, timeout=get_settings().openai_preflight_timeout)
    if result.top_logprobs is not None:
        backend.top_logprobs = result.top_logprobs
    return result


def preflight_method(method: object, mode: Mode | None = None) -> PreflightResult | None:
    """Preflight the backend of a grading method (a ``PromptGrader``); a no-op for the others."""
    backend = getattr(method, "backend", None)
    if backend is None:
        return None
    chosen: Mode = mode or ("score" if getattr(method, "mode", None) == "score" else "generate")
    return preflight_backend(backend, chosen)
