"""A real, local OpenAI-compatible HTTP server for the tests, serving the shipped SmolLM2 model.

It speaks the subset of the API the backend uses (chat and completions, ``logprobs``, ``seed``,
``GET /models``), and can be told to answer the next requests with a 429, a 500, a slow response,
or no logprobs (``faults``, one per request), or to behave like a misconfigured or limited server
until told otherwise: unknown models (404), no logprobs, a truncated top-k, empty replies, a
rejected parameter (400 naming it), a top-k cap (400 above it), or slow replies. Everything under
``/v1`` only: a base URL without it gets 404s, as from a real server. ``dead_url`` is a base URL
nothing listens on.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from app.grading.backends.hf import HuggingFaceBackend


@dataclass
class ServerState:
    faults: list[str] = field(default_factory=list)  # "429" | "500" | "slow" | "no-logprobs"
    requests: int = 0
    slow_seconds: float = 1.5
    # Persistent behaviour (``reset`` restores the defaults).
    models: tuple[str, ...] = ("smollm2",)  # other names get a 404 "model_not_found"
    logprobs: bool = True  # False: never return logprobs (as some servers do)
    top_k_cap: int | None = None  # return at most this many top logprobs, silently
    max_top_logprobs: int | None = None  # 400 when asked for more (OpenAI: 20 chat, 5 completions)
    empty: bool = False  # every reply's text is ""
    rejects: tuple[str, ...] = ()  # body parameters answered with a 400 naming them
    delay: float = 0.0  # seconds every request waits
    fail_after: int | None = None  # answer this many completion requests, then only 500s
    completions: int = 0  # completion requests so far (the preflight's included)
    context_length: int = 8192  # reported by GET /models as max_model_len
    seeds: list[int | None] = field(default_factory=list)  # the ``seed`` of every completion request
    last_full: dict[str, float] = field(default_factory=dict)  # P(digit) over the whole vocabulary, last request

    def reset(self) -> None:
        fresh = ServerState()
        names = ("models", "logprobs", "top_k_cap", "max_top_logprobs", "empty", "rejects", "delay", "fail_after")
        names += ("context_length",)
        for name in (*names, "completions"):
            setattr(self, name, getattr(fresh, name))
        self.faults.clear()
        self.seeds.clear()
        self.last_full = {}


_DIGIT_IDS: dict[str, list[int]] = {}


def _digit_ids(backend: HuggingFaceBackend) -> dict[str, list[int]]:
    """Every vocabulary token that spells a grade digit 0-5 (with or without a leading space)."""
    if not _DIGIT_IDS:
        tokenizer = backend._tokenizer
        texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
        for token_id, text in enumerate(texts):
            if text.strip() in {"0", "1", "2", "3", "4", "5"}:
                _DIGIT_IDS.setdefault(text.strip(), []).append(token_id)
    return _DIGIT_IDS


def _complete(
    backend: HuggingFaceBackend, state: ServerState, text: str, max_tokens: int, top: int | None
) -> tuple[str, list[Any]]:
    if state.empty and (top is None or not state.logprobs):
        return "", []  # the reply a client sees does not depend on the model: spare the CPU
    tokenizer, model = backend._tokenizer, backend._model
    encoded = tokenizer(text, return_tensors="pt", add_special_tokens=False)
    with torch.inference_mode():
        if max_tokens == 1:  # greedy: the first token is the argmax (a score or a preflight request)
            logits = model(**encoded).logits[0, -1].float()
            answer = tokenizer.decode([int(logits.argmax())], skip_special_tokens=True)
        else:  # the first step's logits come with the generation: one pass over the prompt, not two
            output = model.generate(
                **encoded,
                max_new_tokens=max_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
                output_logits=True,
                return_dict_in_generate=True,
            )
            logits = output.logits[0][0].float()
            answer = tokenizer.decode(output.sequences[0, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
    if state.empty:
        answer = ""
    probabilities = logits.softmax(-1)
    state.last_full = {d: float(probabilities[ids].sum()) for d, ids in _digit_ids(backend).items()}
    if top is None or not state.logprobs:
        return answer, []
    logprobs = logits.log_softmax(-1)
    values, ids = logprobs.topk(min(top, state.top_k_cap or top))
    return answer, [(tokenizer.decode([int(i)]), float(v)) for v, i in zip(values, ids, strict=True)]


def _refusal(state: ServerState, body: dict[str, Any], asked_top: int | None) -> JSONResponse | None:
    """A misconfigured request answered as OpenAI answers it: 404 for a model, 400 naming a parameter."""
    if body.get("model") not in state.models:
        message = f"The model `{body.get('model')}` does not exist or you do not have access to it."
        error = {"message": message, "type": "invalid_request_error", "code": "model_not_found"}
        return JSONResponse({"error": error}, status_code=404)
    for name in state.rejects:
        if name in body:
            error = {"message": f"Unrecognized request argument supplied: {name}", "type": "invalid_request_error"}
            return JSONResponse({"error": {**error, "param": name}}, status_code=400)
    if asked_top is not None and state.max_top_logprobs is not None and asked_top > state.max_top_logprobs:
        message = f"Invalid value for 'logprobs': must be less than or equal to {state.max_top_logprobs}."
        error = {"message": message, "type": "invalid_request_error", "param": "logprobs"}
        return JSONResponse({"error": error}, status_code=400)
    return None


def build_app(backend: HuggingFaceBackend, state: ServerState) -> FastAPI:
    app = FastAPI()

    async def fault() -> JSONResponse | str | None:
        state.requests += 1
        if state.delay:
            await asyncio.sleep(state.delay)
        state.completions += 1
        if state.fail_after is not None and state.completions > state.fail_after:
            return JSONResponse({"error": {"message": "the server broke down"}}, status_code=500)
        if not state.faults:
            return None
        kind = state.faults.pop(0)
        if kind == "429":
            return JSONResponse({"error": {"message": "Rate limit reached", "type": "rate_limit"}}, status_code=429)
        if kind == "500":
            return JSONResponse({"error": {"message": "upstream crashed"}}, status_code=500)
        if kind == "slow":
            await asyncio.sleep(state.slow_seconds)
        return kind

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        injected = await fault()
        if isinstance(injected, JSONResponse):
            return injected
        body = await request.json()
        refused = _refusal(state, body, body.get("top_logprobs") if body.get("logprobs") else None)
        if refused is not None:
            return refused
        state.seeds.append(body.get("seed"))
        text = backend._tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True, tokenize=False)
        top = body.get("top_logprobs") if body.get("logprobs") and injected != "no-logprobs" else None
        answer, tops = _complete(backend, state, text, body.get("max_tokens") or 16, top)
        logprobs = None
        if tops:
            first = [{"token": t, "logprob": lp, "bytes": None} for t, lp in tops]
            logprobs = {"content": [{"token": tops[0][0], "logprob": tops[0][1], "bytes": None, "top_logprobs": first}]}
        message = {"role": "assistant", "content": answer}
        return _envelope("chat.completion", body["model"], {"index": 0, "message": message, "logprobs": logprobs})

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        injected = await fault()
        if isinstance(injected, JSONResponse):
            return injected
        body = await request.json()
        refused = _refusal(state, body, body.get("logprobs"))
        if refused is not None:
            return refused
        state.seeds.append(body.get("seed"))
        top = body.get("logprobs") if injected != "no-logprobs" else None
        answer, tops = _complete(backend, state, body["prompt"], body.get("max_tokens") or 16, top)
        logprobs = (
            {"tokens": [tops[0][0]], "token_logprobs": [tops[0][1]], "top_logprobs": [dict(tops)]} if tops else None
        )
        return _envelope("text_completion", body["model"], {"index": 0, "text": answer, "logprobs": logprobs})

    @app.get("/v1/models")
    async def models() -> Any:
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "test", "max_model_len": state.context_length}
            for m in state.models
        ]
        return {"object": "list", "data": data}

    return app


def _envelope(kind: str, model: str, choice: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "test",
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": [{**choice, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def dead_url() -> str:
    """A loopback base URL on a port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@contextmanager
def serve(backend: HuggingFaceBackend) -> Iterator[tuple[str, ServerState]]:
    """Serve on a free loopback port in a thread; yields the base URL and the fault controls."""
    state = ServerState()
    _digit_ids(backend)  # once, before the first request's clock starts
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(build_app(backend, state), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/v1", state
    finally:
        server.should_exit = True
        thread.join(timeout=10)
