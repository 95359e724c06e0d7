"""The extractive-QA (SQuAD2-style) backend, on a tiny BERT reader built in-process with random weights.

Mechanics only (no QA weights ship on PyPI): spans come from the context, the no-answer rule yields
"", and the extraction prompt classes parse the span like any other answer.
"""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import BertConfig, BertForQuestionAnswering, PreTrainedTokenizerFast

from app.grading.backends.qa import QuestionAnsweringBackend
from app.grading.methods import PromptGrader
from app.grading.prompts import CellInput, get_prompt_class

WORDS = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    *["the", "a", "water", "boils", "at", "100", "degrees", "paris", "is", "in", "france", "what", "when", "where"],
]


def _tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]"
    )


@pytest.fixture(scope="module")
def reader() -> QuestionAnsweringBackend:
    torch.manual_seed(1)
    config = BertConfig(
        vocab_size=len(WORDS),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    return QuestionAnsweringBackend.from_loaded(
        "tiny-reader", BertForQuestionAnswering(config), _tokenizer(), max_tokens=64
    )


def test_answers_are_context_spans_or_no_answer(reader: QuestionAnsweringBackend) -> None:
    prompt = get_prompt_class("QuestionCompleteConciseUnanswerablePromptWithChoices")
    context = "water boils at 100 degrees"
    outcomes = PromptGrader(prompt, reader, "generate").grade([CellInput("q", "when water boils", context)] * 1)
    answer = outcomes[0].raw_answer
    assert outcomes[0].error is None and answer is not None
    assert answer == "" or answer in context  # a span of the passage, never of the question
    assert outcomes[0].correct is (answer != "")  # "" is a non-answer for the extraction parser


def test_no_answer_wins_when_the_first_token_scores_highest(reader: QuestionAnsweringBackend) -> None:
    model = reader._model
    with torch.no_grad():
        model.qa_outputs.bias.fill_(0.0)
    original = model.forward

    def cls_favouring(*args: object, **kwargs: object) -> object:
        output = original(*args, **kwargs)
        output.start_logits[:, 0] = 100.0
        output.end_logits[:, 0] = 100.0
        return output

    model.forward = cls_favouring  # type: ignore[method-assign]
    try:
        prompt = get_prompt_class("QuestionCompleteConciseUnanswerablePromptWithChoices")
        outcome = PromptGrader(prompt, reader, "generate").grade(
            [CellInput("q", "where is paris", "paris is in france")]
        )[0]
    finally:
        model.forward = original  # type: ignore[method-assign]
    assert outcome.raw_answer == "" and outcome.correct is False


def test_score_mode_and_direct_prompts_are_refused_per_cell(reader: QuestionAnsweringBackend) -> None:
    with pytest.raises(ValueError, match="free text"):
        PromptGrader(get_prompt_class("NuggetExtractionPrompt"), reader, "score")
    direct = PromptGrader(get_prompt_class("Sun"), reader, "generate").grade([CellInput("q", "", "paris is in france")])
    assert direct[0].error is not None and "QA reader" in direct[0].error
