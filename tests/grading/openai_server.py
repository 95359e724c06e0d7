"""A real, local OpenAI-compatible HTTP server for the tests, serving the shipped SmolLM2 model.

It speaks the subset of the API the backend uses (chat and completions, ``logprobs``), and can be
told to answer the next requests with a 429, a 500, a slow response, or no logprobs.
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


def _complete(backend: HuggingFaceBackend, text: str, max_tokens: int, top: int | None) -> tuple[str, list[Any]]:
    tokenizer, model = backend._tokenizer, backend._model
    encoded = tokenizer(text, return_tensors="pt", add_special_tokens=False)
    with torch.inference_mode():
        logits = model(**encoded).logits[0, -1].float()
        output = model.generate(
            **encoded, max_new_tokens=max_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
        )
    answer = tokenizer.decode(output[0, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
    if top is None:
        return answer, []
    logprobs = logits.log_softmax(-1)
    values, ids = logprobs.topk(top)
    return answer, [(tokenizer.decode([int(i)]), float(v)) for v, i in zip(values, ids, strict=True)]


def build_app(backend: HuggingFaceBackend, state: ServerState) -> FastAPI:
    app = FastAPI()

    async def fault() -> JSONResponse | str | None:
        state.requests += 1
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
        text = backend._tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True, tokenize=False)
        top = body.get("top_logprobs") if body.get("logprobs") and injected != "no-logprobs" else None
        answer, tops = _complete(backend, text, body.get("max_tokens") or 16, top)
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
        top = body.get("logprobs") if injected != "no-logprobs" else None
        answer, tops = _complete(backend, body["prompt"], body.get("max_tokens") or 16, top)
        logprobs = (
            {"tokens": [tops[0][0]], "token_logprobs": [tops[0][1]], "top_logprobs": [dict(tops)]} if tops else None
        )
        return _envelope("text_completion", body["model"], {"index": 0, "text": answer, "logprobs": logprobs})

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


@contextmanager
def serve(backend: HuggingFaceBackend) -> Iterator[tuple[str, ServerState]]:
    """Serve on a free loopback port in a thread; yields the base URL and the fault controls."""
    state = ServerState()
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
