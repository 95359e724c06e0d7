"""Grading methods: a prompt class on an LLM backend (``generate`` or ``score``), or a similarity grader.

A method turns cells into outcomes and says what its outcomes depend on (``key_material``), which
is what the content-addressed cache hashes.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from app.errors import Invalid
from app.grading.backends.base import Backend, BackendError, ScoreResult
from app.grading.prompts import CellInput, PromptClass, PromptMessages, PromptTooLong

Mode = Literal["generate", "score"]


@dataclass(slots=True)
class Outcome:
    """What one cell's grading produced; ``error`` set means nothing else is trustworthy."""

    raw_answer: str | None = None
    self_rating: int | None = None
    extracted_answer: str | None = None
    correct: bool | None = None
    probabilities: dict[str, float] | None = None
    expected_grade: float | None = None
    valid_mass: float | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class GraderConfig:
    """The grader row: model label, prompt class, template hash, how it was run, and its identity.

    ``identity`` (see ``grader_identity``) is what the row is found by; the other fields describe it.
    """

    model: str
    prompt_class: str
    template_hash: str
    prompt_type: str
    is_self_rated: bool
    options: dict[str, Any] = field(default_factory=dict)
    identity: dict[str, Any] = field(default_factory=dict)


# Settings that change how fast or where a grader runs, never what it answers: not in its identity.
NOT_IDENTITY = frozenset({"label", "device", "batch_size", "batch_tokens", "concurrency", "timeout", "max_retries"})


def grader_identity(
    method_identity: dict[str, Any], *, prompt_class: str, prompt_type: str, template_hash: str
) -> dict[str, Any]:
    """Everything that changes a grader's grades: the method's identity (the dict the cache key hashes).

    Backend, endpoint, model and revision, decoding (temperature, seed, output tokens, beams, dtype),
    top-k of logprobs, mode, JSON mode, chat template and tokenizer, as the method reports them,
    plus the prompt class, prompt type and template. A base URL is reduced to its host (the netloc
    without credentials): which server answered matters, a path or a key in it does not belong here.
    """
    identity = {k: v for k, v in method_identity.items() if k not in NOT_IDENTITY}
    if isinstance(identity.get("base_url"), str):
        identity["base_url"] = base_url_host(identity["base_url"])
    return {**identity, "prompt_class": prompt_class, "prompt_type": prompt_type, "template_hash": template_hash}


def base_url_host(url: str) -> str:
    """``host[:port]`` of a URL, never its user or password."""
    parts = urlsplit(url if "//" in url else f"//{url}")
    host = parts.hostname or ""
    return f"{host}:{parts.port}" if parts.port else host


class GradingMethod(Protocol):
    @property
    def calls(self) -> int:
        """Texts sent to the model so far; cache hits never count."""
        ...

    def config(self) -> GraderConfig: ...

    def identity(self) -> dict[str, Any]: ...

    def key_material(self, cell: CellInput) -> list[Any]: ...

    def grade(self, cells: Sequence[CellInput]) -> list[Outcome]: ...


def cache_key(method: GradingMethod, cell: CellInput) -> str:
    """sha256 of the method's identity (model, revision, backend, decoding, template) and the cell's texts."""
    payload = json.dumps([method.identity(), method.key_material(cell)], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class PromptGrader:
    """A prompt class on an LLM backend."""

    def __init__(self, prompt: PromptClass, backend: Backend, mode: Mode = "generate", json_mode: bool = False) -> None:
        if mode == "score" and not prompt.score_choices:
            raise Invalid(f"{prompt.name} answers in free text; score mode needs a rating or yes/no prompt")
        self.prompt = prompt
        self.backend = backend
        self.mode = mode
        self.json_mode = json_mode

    @property
    def calls(self) -> int:
        return self.backend.calls

    def config(self) -> GraderConfig:
        identity = self.backend.identity()
        label = str(identity.get("label") or identity["model"])
        template_hash = self.prompt.template_hash()
        return GraderConfig(
            model=label if self.mode == "generate" else f"{label}:score",
            prompt_class=self.prompt.name,
            template_hash=template_hash,
            prompt_type=self.prompt.prompt_type,
            is_self_rated=self.prompt.is_self_rated,
            options={"source": "rubric grade", "mode": self.mode, "json_mode": self.json_mode, **identity},
            identity=grader_identity(
                self.identity(),
                prompt_class=self.prompt.name,
                prompt_type=self.prompt.prompt_type,
                template_hash=template_hash,
            ),
        )

    def identity(self) -> dict[str, Any]:
        return {
            **self.backend.identity(),
            "prompt_class": self.prompt.name,
            "template": self.prompt.template_hash(),
            "mode": self.mode,
            "json_mode": self.json_mode,
        }

    def key_material(self, cell: CellInput) -> list[Any]:
        query = cell.query_text if self.prompt.is_direct else None
        gold = list(cell.gold_answers) if self.prompt.parser in ("answer_key", "brief_answer_key") else None
        return [query, cell.item_text, cell.passage_text, gold]

    def grade(self, cells: Sequence[CellInput]) -> list[Outcome]:
        outcomes: list[Outcome | None] = [None] * len(cells)
        prompts: list[PromptMessages] = []
        sent: list[int] = []
        budget = self.backend.max_prompt_tokens
        for index, cell in enumerate(cells):
            try:
                prompts.append(self._render(cell, budget))
                sent.append(index)
            except (PromptTooLong, ValueError) as error:
                outcomes[index] = Outcome(error=f"{type(error).__name__}: {error}")
        results = self._ask(prompts)
        for index, result in zip(sent, results, strict=True):
            outcomes[index] = self._outcome(result, cells[index])
        return [o if o is not None else Outcome(error="not graded") for o in outcomes]

    def _render(self, cell: CellInput, budget: int) -> PromptMessages:
        if not cell.passage_text.strip():
            raise ValueError("empty passage")
        if getattr(self.backend, "question_answering", False):
            return self.prompt.render_qa(cell)
        rendered = self.prompt.render(cell, self.backend.tokenizer, budget)
        if self.json_mode and self.prompt.json_instruction:
            return PromptMessages(
                text=rendered.text + self.prompt.json_instruction,
                system=rendered.system,
                user=None if rendered.user is None else rendered.user + self.prompt.json_instruction,
            )
        return rendered

    def _ask(self, prompts: list[PromptMessages]) -> Sequence[str | ScoreResult | BackendError]:
        if not prompts:
            return []
        if self.mode == "score":
            return self.backend.score(prompts, self.prompt.score_choices)
        return self.backend.generate(prompts)

    def _outcome(self, result: str | ScoreResult | BackendError, cell: CellInput) -> Outcome:
        if isinstance(result, BackendError):
            return Outcome(error=str(result))
        if isinstance(result, ScoreResult):
            return self._score_outcome(result, cell)
        if not result.strip() and getattr(self.backend, "empty_reply_is_error", False):
            # A server's reply with no text (a reasoning model that spent its tokens, a filtered
            # answer) is no answer: an error, never a rating of 1 (and never cached), so a rerun
            # asks again. A local model's empty answer keeps the reference's rating 1 (spec §1.6).
            return Outcome(raw_answer=result, error="EmptyReply: the model returned no text")
        try:
            answer = extract_json_field(result, self.prompt.json_field) if self.json_mode else result
        except ValueError as error:
            return Outcome(raw_answer=result, error=f"could not parse the model's JSON: {error}")
        verdict = self.prompt.parse(answer, cell.gold_answers)
        return Outcome(result, verdict.self_rating, verdict.extracted_answer, verdict.correct)

    def _score_outcome(self, result: ScoreResult, cell: CellInput) -> Outcome:
        """The grade from a distribution over the choices observed (a backend may leave unseen ones out)."""
        if not result.probabilities:
            return Outcome(error="NoAnswerToken: no answer token among the scored tokens")
        best = max(result.probabilities, key=lambda c: result.probabilities[c])
        verdict = self.prompt.parse(best, cell.gold_answers)
        if self.prompt.parser == "yes_no":
            expected = result.probabilities.get("Yes", 0.0)
        else:
            expected = sum(int(choice) * p for choice, p in result.probabilities.items())
        return Outcome(
            raw_answer=best,
            self_rating=verdict.self_rating,
            correct=verdict.correct,
            probabilities=dict(result.probabilities),
            expected_grade=expected,
            valid_mass=result.valid_mass,
        )


_FENCE = re.compile(r"^```(?:json)?\s*|\s*```\s*$")


def extract_json_field(answer: str, field_name: str) -> str:
    """The reference's JSON-mode answer: strip fences, parse, read the field, return ``f"{value}"`` (spec §1.4.5).

    A missing field gives "None" (which the self-rater maps to 0); unparsable JSON raises ValueError.
    """
    text = _FENCE.sub("", answer.strip())
    parsed = json.loads(text)
    value = parsed.get(field_name) if isinstance(parsed, dict) else None
    return f"{value}"
