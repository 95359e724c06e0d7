"""Prompt classes: how a cell becomes a prompt, and how an answer becomes a grade (spec §1.3-§1.7).

A prompt class is data (templates, a parser name, a JSON field) plus two behaviours that follow
the reference exactly: assembly with truncation (§1.5) and parsing (§1.6, §1.7).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from app.errors import Invalid, NotFound
from app.evaluation.answer_key import verify_answer
from app.evaluation.parsing import (
    DIRECT_MATCHER,
    RATING_MATCHER,
    UnanswerableMatcher,
    parse_direct_yes_no,
    parse_self_rating,
    parse_thomas_rating,
)
from app.grading import templates as t

Parser = Literal["rating", "thomas", "yes_no", "answerable", "answer_key", "brief_answer_key", "free"]
PromptType = Literal["question", "nugget", "direct_grading"]
_PLACEHOLDER = re.compile(r"\{(question|nugget|context|query)\}")
TRUNCATION_SLACK = 5  # the reference keeps five tokens spare


class PromptTooLong(ValueError):
    """The instruction and item alone exceed the model's context window."""


class Tokenizer(Protocol):
    """What truncation needs from a tokenizer (spec §1.5)."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def num_special_tokens(self) -> int: ...


@dataclass(frozen=True, slots=True)
class CellInput:
    """Everything a grade depends on besides the grader: the cache key hashes exactly this."""

    query_text: str
    item_text: str  # "" for direct prompts
    passage_text: str
    gold_answers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PromptMessages:
    """A rendered prompt: the text pipelines send ``text``; chat backends send ``system`` + ``user``."""

    text: str
    system: str | None = None
    user: str | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    self_rating: int | None
    extracted_answer: str | None
    correct: bool | None


def fill(template: str, **values: str) -> str:
    """Substitute ``{question}``/``{nugget}``/``{context}``/``{query}`` in one pass (passages may hold braces)."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


@dataclass(frozen=True)
class PromptClass:
    """One grading prompt. Item prompts: ``question_part`` + ``context_part``; direct prompts: ``template``."""

    name: str
    prompt_type: PromptType
    parser: Parser
    question_part: str = ""
    context_part: str = "Context: {context}"
    template: str = ""
    chat_system: str | None = None  # the chat variant sends this as a system message
    chat_user: str = "Question: {question}\nContext: {context}"
    json_instruction: str = ""
    json_field: str = ""
    letter_choices: bool = True
    description: str = ""
    item_placeholder: str = "question"

    @property
    def is_direct(self) -> bool:
        return self.prompt_type == "direct_grading"

    @property
    def is_self_rated(self) -> bool:
        return self.parser in ("rating", "thomas")

    @property
    def score_choices(self) -> tuple[str, ...]:
        """Answer tokens read in ``score`` mode; empty when the answer is free text."""
        if self.parser == "rating":
            return ("0", "1", "2", "3", "4", "5")
        if self.parser == "thomas":
            return ("0", "1", "2")
        if self.parser == "yes_no":
            return ("Yes", "No")
        return ()

    @property
    def matcher(self) -> UnanswerableMatcher:
        if self.is_direct:
            return DIRECT_MATCHER
        return RATING_MATCHER if self.letter_choices else UnanswerableMatcher()

    def template_hash(self) -> str:
        """Content hash of everything that shapes the prompt or its parsing; stored on each grade."""
        payload = [
            self.question_part,
            self.context_part,
            self.template,
            self.chat_system,
            self.chat_user,
            self.json_instruction,
            self.json_field,
            self.parser,
            self.letter_choices,
        ]
        return hashlib.sha256(json.dumps(payload).encode()).hexdigest()

    def render(self, cell: CellInput, tokenizer: Tokenizer, max_tokens: int) -> PromptMessages:
        """The prompt for one cell, with the context cut at the end so the whole fits ``max_tokens``."""
        if self.is_direct:
            return PromptMessages(text=self._render_direct(cell, tokenizer, max_tokens))
        item = {self.item_placeholder: cell.item_text}
        question_part = fill(self.question_part, **item)
        context_part = fill(self.context_part, context=cell.passage_text, **item)
        text = _truncate_after(question_part, context_part, tokenizer, max_tokens)
        if self.chat_system is None:
            return PromptMessages(text=text)
        system_budget = max_tokens - len(tokenizer.encode(self.chat_system))
        user_head = fill(self.chat_user.split("{context}")[0], **item)
        user = _truncate_after(user_head, cell.passage_text, tokenizer, system_budget)
        return PromptMessages(text=text, system=self.chat_system, user=user)

    def render_qa(self, cell: CellInput) -> PromptMessages:
        """The QA-pipeline variant: ``system`` = the question part, ``user`` = the passage (the reader truncates it)."""
        if self.is_direct:
            raise Invalid(f"{self.name}: an extractive QA reader grades question and nugget prompts only")
        question = fill(self.question_part, **{self.item_placeholder: cell.item_text}).rstrip("\n")
        return PromptMessages(text=f"{question}\n{cell.passage_text}", system=question, user=cell.passage_text)

    def _render_direct(self, cell: CellInput, tokenizer: Tokenizer, max_tokens: int) -> str:
        empty = fill(self.template, query=cell.query_text, context="")
        budget = max_tokens - len(tokenizer.encode(empty)) - tokenizer.num_special_tokens() - TRUNCATION_SLACK
        if budget <= 0:
            raise PromptTooLong(f"{self.name}: the query alone exceeds {max_tokens} tokens")
        context = tokenizer.decode(tokenizer.encode(cell.passage_text)[:budget])
        return fill(self.template, query=cell.query_text, context=context)

    def parse(self, answer: str, gold_answers: Sequence[str] = ()) -> Verdict:
        """The reference verdict for one raw answer (spec §1.6, §1.7)."""
        return _PARSE[self.parser](self, answer, gold_answers)


def _truncate_after(head: str, tail: str, tokenizer: Tokenizer, max_tokens: int) -> str:
    """decode(tokens(head) + tokens(tail)[:budget]); the head is never cut (spec §1.5)."""
    head_ids = tokenizer.encode(head)
    budget = max_tokens - len(head_ids) - tokenizer.num_special_tokens() - TRUNCATION_SLACK
    if budget <= 0:
        raise PromptTooLong(f"question too long: {len(head_ids)} tokens leave no room in {max_tokens}")
    return tokenizer.decode(head_ids + tokenizer.encode(tail)[:budget])


def _rating(prompt: PromptClass, answer: str, _gold: Sequence[str]) -> Verdict:
    rating = parse_self_rating(answer, prompt.matcher)
    return Verdict(rating, None, rating > 0)


def _thomas(prompt: PromptClass, answer: str, _gold: Sequence[str]) -> Verdict:
    rating = parse_thomas_rating(answer, prompt.matcher)
    return Verdict(rating, None, rating > 0)


def _yes_no(prompt: PromptClass, answer: str, _gold: Sequence[str]) -> Verdict:
    relevant = parse_direct_yes_no(answer, prompt.matcher)
    return Verdict(int(relevant), None, relevant)


def _answerable(prompt: PromptClass, answer: str, _gold: Sequence[str]) -> Verdict:
    return Verdict(None, answer, prompt.matcher.is_real_answer(answer))


def _answer_key(_prompt: PromptClass, answer: str, gold: Sequence[str]) -> Verdict:
    return Verdict(None, answer, verify_answer(answer, gold) if gold else None)


def _brief_answer_key(prompt: PromptClass, answer: str, gold: Sequence[str]) -> Verdict:
    if answer.strip().lower() == "unanswerable":
        return Verdict(None, answer, False)
    return _answer_key(prompt, answer, gold)


def _free(_prompt: PromptClass, answer: str, _gold: Sequence[str]) -> Verdict:
    return Verdict(None, answer, None)


_PARSE: dict[str, Callable[[PromptClass, str, Sequence[str]], Verdict]] = {
    "rating": _rating,
    "thomas": _thomas,
    "yes_no": _yes_no,
    "answerable": _answerable,
    "answer_key": _answer_key,
    "brief_answer_key": _brief_answer_key,
    "free": _free,
}

_EXTRACTION_PART = "provide a complete and concise answer to the question based on the context. Question: {question}\n"
_SELF_RATED_PART = t.SELF_RATED_PRETEXT + "\n Question: {question}\n"


def _direct(name: str, template: str, parser: Parser = "yes_no") -> PromptClass:
    instruction = t.RELEVANCE_INT_JSON if parser == "thomas" else t.RELEVANCE_BOOL_JSON
    return PromptClass(
        name=name,
        prompt_type="direct_grading",
        parser=parser,
        template=template,
        json_instruction=instruction,
        json_field="relevance",
        description=f"direct relevance prompt {name} (one prompt per query and passage)",
    )


BUILTIN: tuple[PromptClass, ...] = (
    PromptClass(
        name="QuestionSelfRatedUnanswerablePromptWithChoices",
        prompt_type="question",
        parser="rating",
        question_part=_SELF_RATED_PART,
        json_instruction=t.GRADE_JSON_STRICT,
        json_field="grade",
        description="EXAM/RUBRIC default: self-rating 0-5 of how well the passage answers the question",
    ),
    PromptClass(
        name="QuestionSelfRatedPrompt",
        prompt_type="question",
        parser="rating",
        question_part=_SELF_RATED_PART,
        chat_system=t.SELF_RATED_CHAT_SYSTEM,
        json_instruction=t.GRADE_JSON_STRICT,
        json_field="grade",
        description="chat variant of the self-rating prompt (system + user messages)",
    ),
    PromptClass(
        name="QuestionCompleteConciseUnanswerablePromptWithChoices",
        prompt_type="question",
        parser="answerable",
        question_part=_EXTRACTION_PART,
        json_instruction=t.SHORT_ANSWER_JSON,
        json_field="short_answer",
        description="answer extraction; correct iff the answer is not a refusal",
    ),
    PromptClass(
        name="QuestionAnswerablePromptWithChoices",
        prompt_type="question",
        parser="answerable",
        question_part=" question: How does this text answer this question: {question}",
        context_part="context: {context};",
        json_instruction=t.SHORT_ANSWER_JSON,
        json_field="short_answer",
        description="'How does this text answer…' extraction",
    ),
    PromptClass(
        name="QuestionCompleteConcisePromptWithAnswerKey2",
        prompt_type="question",
        parser="answer_key",
        question_part=_EXTRACTION_PART,
        json_instruction=t.SHORT_ANSWER_JSON,
        json_field="short_answer",
        description="answer extraction verified against the gold answers (stemmed, fuzzy; §1.7)",
    ),
    PromptClass(
        name="QuestionBriefWithAnswerKey",
        prompt_type="question",
        parser="brief_answer_key",
        question_part=t.BRIEF_ANSWER_KEY_SYSTEM + "\n Question: {question}\n",
        chat_system=t.BRIEF_ANSWER_KEY_SYSTEM,
        json_instruction=t.SHORT_ANSWER_JSON_STRICT,
        json_field="short_answer",
        description="brief answer or 'unanswerable', verified against the gold answers",
    ),
    PromptClass(
        name="NuggetSelfRatedPrompt",
        prompt_type="nugget",
        parser="rating",
        question_part=t.NUGGET_SELF_RATED_PRETEXT + "\n Key fact: {nugget}\n",
        json_instruction=t.GRADE_JSON,
        json_field="grade",
        item_placeholder="nugget",
        description="self-rating 0-5 of how well the passage covers the nugget",
    ),
    PromptClass(
        name="NuggetExtractionPrompt",
        prompt_type="nugget",
        parser="answerable",
        question_part="Extract the passage from the text that best relates to the key fact (nugget), "
        "ensuring relevance and clarity. Key Fact: {nugget}\n",
        json_instruction=t.EXTRACT_JSON,
        json_field="extract",
        item_placeholder="nugget",
        description="nugget extraction; correct iff the extract is not a refusal",
    ),
    _direct("Sun", t.SUN),
    _direct("Sun_few", t.SUN_FEW),
    _direct("FagB", t.FAGB),
    _direct("FagB_few", t.FAGB_FEW),
    _direct("HELM", t.HELM),
    _direct("Thomas", t.THOMAS, parser="thomas"),
)

_REGISTRY: dict[str, PromptClass] = {p.name: p for p in BUILTIN}
DEFAULT_PROMPT_CLASS = "QuestionSelfRatedUnanswerablePromptWithChoices"


class UnknownPromptClass(NotFound):
    pass


def get_prompt_class(name: str) -> PromptClass:
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise UnknownPromptClass(f"unknown prompt class {name!r}; known: {known}") from None


def prompt_class_names() -> list[str]:
    return sorted(_REGISTRY)


def register_custom(path: Path, parser: str, name: str | None = None, kind: str = "question") -> PromptClass:
    """A user prompt class from a template file with ``{question}``/``{context}``/``{query}`` (or ``{nugget}``).

    As in the reference's CustomQuestionSelfRatedPrompt, the filled template is cut at the end to fit.
    """
    if parser not in ("rating", "yes_no", "free"):
        raise Invalid(f"{path}: custom prompt parser must be rating, yes_no or free, not {parser!r}")
    text = path.read_text(encoding="utf-8")
    if "{context}" not in text:
        raise Invalid(f"{path}: a custom prompt template needs a {{context}} placeholder")
    direct = "{question}" not in text and "{nugget}" not in text
    prompt_type: PromptType = "direct_grading" if direct else ("nugget" if kind == "nugget" else "question")
    prompt = PromptClass(
        name=name or f"Custom:{path.stem}",
        prompt_type=prompt_type,
        parser=parser,  # type: ignore[arg-type]
        template=text if direct else "",
        question_part="" if direct else text.split("{context}")[0],
        context_part="" if direct else "{context}" + text.split("{context}", 1)[1],
        item_placeholder="nugget" if "{nugget}" in text else "question",
        description=f"custom prompt from {path.name}",
    )
    _REGISTRY[prompt.name] = prompt
    return prompt
