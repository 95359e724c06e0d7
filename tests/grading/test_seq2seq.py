"""The seq2seq (T5) path of the local backend, on a tiny T5 built in-process with random weights.

No T5 weights ship on PyPI, so this checks mechanics only: one decoder step in ``score``, 5-beam
``generate`` by default (the reference's text2text setting), batching and truncation.
"""

from __future__ import annotations

import pytest
import torch

from app.grading.backends.hf import HuggingFaceBackend
from app.grading.methods import PromptGrader
from app.grading.prompts import CellInput, get_prompt_class
from bench.grading import t5_model, word_tokenizer

VOCAB = 512


@pytest.fixture(scope="module")
def tiny_t5() -> HuggingFaceBackend:
    torch.manual_seed(0)
    return HuggingFaceBackend.from_loaded(
        "tiny-t5", t5_model(VOCAB, "tiny"), word_tokenizer(VOCAB), dtype="float32", max_tokens=160, max_new_tokens=3
    )


def test_seq2seq_defaults_to_five_beams(tiny_t5: HuggingFaceBackend) -> None:
    assert tiny_t5.is_seq2seq and tiny_t5.num_beams == 5
    assert tiny_t5.identity()["num_beams"] is None  # "the architecture's default", known without loading


def test_seq2seq_score_and_generate(tiny_t5: HuggingFaceBackend) -> None:
    prompt = get_prompt_class("QuestionSelfRatedUnanswerablePromptWithChoices")
    cells = [CellInput("q", f"w{i} w{i + 1} ?", " ".join(f"w{j}" for j in range(40 + i))) for i in range(5)]
    scored = PromptGrader(prompt, tiny_t5, "score").grade(cells)
    for outcome in scored:
        assert outcome.error is None and outcome.probabilities is not None
        assert sum(outcome.probabilities.values()) == pytest.approx(1.0)
        assert 0 < (outcome.valid_mass or 0) <= 1 and outcome.self_rating in range(6)
    generated = PromptGrader(prompt, tiny_t5, "generate").grade(cells[:2])
    assert all(o.error is None and o.raw_answer is not None for o in generated)
    single = PromptGrader(prompt, tiny_t5, "score").grade(cells[:1])[0]
    assert single.probabilities is not None and scored[0].probabilities is not None
    assert single.probabilities["3"] == pytest.approx(scored[0].probabilities["3"], abs=1e-4)
