"""Prompt classes: byte-exact texts, truncation that never cuts the question, reference parsing."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from app.grading import templates
from app.grading.backends.base import token_budget_batches
from app.grading.methods import extract_json_field
from app.grading.prompts import (
    BUILTIN,
    CellInput,
    PromptTooLong,
    fill,
    get_prompt_class,
    register_custom,
)

SPEC = Path(__file__).resolve().parents[3] / "shared" / "spec" / "upstream-reference.md"


class CharTokenizer:
    """One token per character: decode(encode(x)) == x, so rendered text can be compared byte for byte."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(chr(i) for i in ids)

    def num_special_tokens(self) -> int:
        return 1


@pytest.fixture(scope="module")
def spec_prompts() -> list[str]:
    if not SPEC.is_file():
        if os.environ.get("CI"):  # CI runs beside ../shared: a missing spec is a failure, never a silent skip
            pytest.fail(f"parity spec not found at {SPEC}")
        pytest.skip(f"parity spec not found at {SPEC}")
    return [json.loads(b) for b in re.findall(r"~~~~json\n(\".*?\")\n~~~~", SPEC.read_text(), re.S)]


CELL = CellInput(query_text="how many eye drops per ml", item_text="What is X?", passage_text="X is {braces} 42.")


def _spec_form(text: str) -> str:
    return text.replace("{self.query_text}", "{query}")


def test_every_template_constant_is_a_spec_text(spec_prompts: list[str]) -> None:
    spec = {_spec_form(p) for p in spec_prompts}
    for name in (
        "SUN",
        "SUN_FEW",
        "FAGB",
        "FAGB_FEW",
        "HELM",
        "THOMAS",
        "SELF_RATED_PRETEXT",
        "NUGGET_SELF_RATED_PRETEXT",
        "SELF_RATED_CHAT_SYSTEM",
        "BRIEF_ANSWER_KEY_SYSTEM",
        "DL_QUESTION_GENERATION",
        "CAR_NUGGET_GENERATION",
        "QUESTION_JSON_INSTRUCTION",
        "T5_ANSWER_VERIFICATION",
    ):
        assert getattr(templates, name) in spec, name


@pytest.mark.parametrize(
    ("prompt_class", "spec_prefix"),
    [
        (
            "QuestionSelfRatedUnanswerablePromptWithChoices",
            "Can the question be answered based on the available context? choose one:",
        ),
        ("NuggetSelfRatedPrompt", "Given the context, evaluate the coverage"),
        ("QuestionCompleteConciseUnanswerablePromptWithChoices", "provide a complete and concise answer"),
        ("NuggetExtractionPrompt", "Extract the passage from the text"),
    ],
)
def test_item_prompts_render_the_spec_text_byte_for_byte(
    spec_prompts: list[str], prompt_class: str, spec_prefix: str
) -> None:
    full = [p for p in spec_prompts if p.startswith(spec_prefix) and "{context}" in p][-1]
    prompt = get_prompt_class(prompt_class)
    expected = fill(full, question=CELL.item_text, nugget=CELL.item_text, context=CELL.passage_text)
    assert prompt.render(CELL, CharTokenizer(), 10_000).text == expected


@pytest.mark.parametrize("name", ["Sun", "Sun_few", "FagB", "FagB_few", "HELM", "Thomas"])
def test_direct_prompts_render_the_spec_text_byte_for_byte(spec_prompts: list[str], name: str) -> None:
    prompt = get_prompt_class(name)
    spec = next(_spec_form(p) for p in spec_prompts if _spec_form(p) == prompt.template)
    assert prompt.render(CELL, CharTokenizer(), 10_000).text == fill(
        spec, query=CELL.query_text, context=CELL.passage_text
    )


def test_answerable_prompt_has_no_separator_and_leading_space() -> None:
    text = get_prompt_class("QuestionAnswerablePromptWithChoices").render(CELL, CharTokenizer(), 1000).text
    assert text == " question: How does this text answer this question: What is X?context: X is {braces} 42.;"


def test_truncation_cuts_only_the_context_end() -> None:
    prompt = get_prompt_class("QuestionSelfRatedUnanswerablePromptWithChoices")
    long_cell = CellInput("q", "What is X?", "word " * 500)
    head = fill(prompt.question_part, question="What is X?")
    text = prompt.render(long_cell, CharTokenizer(), 800).text
    assert text.startswith(head + "Context: word")
    assert len(text) == 800 - 1 - 5  # budget = max − special − 5
    with pytest.raises(PromptTooLong):
        prompt.render(CellInput("q", "why? " * 400, "short"), CharTokenizer(), 800)


def test_direct_truncation_keeps_the_template_whole() -> None:
    prompt = get_prompt_class("HELM")
    text = prompt.render(CellInput("my query", "", "p" * 5000), CharTokenizer(), 400).text
    assert text.startswith("Instruction: Does the passage answer the query?") and text.endswith("\nAnswer:\n")
    assert len(text) == 400 - 1 - 5


def test_chat_class_sends_system_and_user_messages() -> None:
    rendered = get_prompt_class("QuestionSelfRatedPrompt").render(CELL, CharTokenizer(), 10_000)
    assert rendered.system == templates.SELF_RATED_CHAT_SYSTEM
    assert rendered.user == "Question: What is X?\nContext: X is {braces} 42."


@pytest.mark.parametrize(
    ("name", "answer", "rating", "correct"),
    [
        ("QuestionSelfRatedUnanswerablePromptWithChoices", "4", 4, True),
        ("QuestionSelfRatedUnanswerablePromptWithChoices", "(3).", 3, True),
        ("QuestionSelfRatedUnanswerablePromptWithChoices", "CDG", 0, False),  # a real answer → 0 (code, not paper)
        ("QuestionSelfRatedUnanswerablePromptWithChoices", "unanswerable", 1, True),
        ("QuestionSelfRatedUnanswerablePromptWithChoices", "A.", 1, True),  # letter choice = non-answer
        ("QuestionSelfRatedUnanswerablePromptWithChoices", "8", 0, False),
        ("Thomas", "4", 0, False),
        ("Thomas", "2", 2, True),
        ("Sun", "Yes", 1, True),
        ("Sun", "Yes.", 0, False),
        ("Sun", "No", 0, False),
    ],
)
def test_parsers_follow_the_reference(name: str, answer: str, rating: int, correct: bool) -> None:
    verdict = get_prompt_class(name).parse(answer)
    assert (verdict.self_rating, verdict.correct) == (rating, correct)


def test_answer_key_and_extraction_parsers() -> None:
    key = get_prompt_class("QuestionCompleteConcisePromptWithAnswerKey2")
    assert key.parse("The Beatles.", ["the beatles"]).correct is True
    assert key.parse("Rolling Stones", ["the beatles"]).correct is False
    assert key.parse("anything").correct is None  # no gold answers: no verdict
    brief = get_prompt_class("QuestionBriefWithAnswerKey")
    assert brief.parse("unanswerable", ["x"]).correct is False
    extraction = get_prompt_class("QuestionCompleteConciseUnanswerablePromptWithChoices")
    assert extraction.parse("not enough information").correct is False
    assert extraction.parse("the 1990s").extracted_answer == "the 1990s"


def test_template_hashes_are_distinct_and_stable() -> None:
    hashes = [p.template_hash() for p in BUILTIN]
    assert len(set(hashes)) == len(hashes)
    assert get_prompt_class("Sun").template_hash() == get_prompt_class("Sun").template_hash()


def test_custom_prompt_class(tmp_path: Path) -> None:
    path = tmp_path / "strict.txt"
    path.write_text("Rate 0-5 how well the text answers {question}.\nText: {context}\nGrade:")
    prompt = register_custom(path, "rating")
    assert prompt.name == "Custom:strict" and prompt.prompt_type == "question"
    assert (
        prompt.render(CELL, CharTokenizer(), 1000).text
        == "Rate 0-5 how well the text answers What is X?.\nText: X is {braces} 42.\nGrade:"
    )
    assert prompt.parse("5").self_rating == 5
    path.write_text("Edited {question} {context}")
    assert register_custom(path, "rating").template_hash() != prompt.template_hash()
    with pytest.raises(ValueError, match="placeholder"):
        path.write_text("no context here {question}")
        register_custom(path, "rating")


def test_json_mode_answers() -> None:
    assert extract_json_field('```json\n{ "grade": 4 }\n```', "grade") == "4"
    assert extract_json_field('{"relevance": true}', "relevance") == "True"
    assert extract_json_field('{"other": 1}', "grade") == "None"
    with pytest.raises(ValueError):
        extract_json_field("four", "grade")


def test_token_budget_batches_bucket_by_length() -> None:
    lengths = [10, 500, 12, 480, 11, 9]
    batches = token_budget_batches(lengths, batch_tokens=1000)
    assert sorted(i for b in batches for i in b) == list(range(6))
    for batch in batches:
        assert len(batch) * max(lengths[i] for i in batch) <= 1000 or len(batch) == 1
    assert batches[0] == [5, 0, 4, 2]  # the short prompts share one batch
