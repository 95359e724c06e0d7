"""What every LLM backend offers the grading engine: generate text, or read next-token scores."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from app.grading.prompts import PromptMessages, Tokenizer


@dataclass(frozen=True, slots=True)
class ScoreResult:
    """Next-token distribution restricted to the answer choices.

    ``probabilities`` is renormalised over the choices; ``valid_mass`` is the unnormalised
    probability that fell on them (low mass means the model wanted to say something else).
    """

    probabilities: dict[str, float]
    valid_mass: float


class BackendError(RuntimeError):
    """A model call failed for one prompt after every retry; recorded on that cell only."""


class Backend(Protocol):
    """An LLM behind the grading engine. Results are per prompt: a ``BackendError`` marks a failed one."""

    name: str
    calls: int  # prompts sent to the model (cache hits never reach a backend)

    @property
    def tokenizer(self) -> Tokenizer: ...

    @property
    def max_prompt_tokens(self) -> int: ...

    def identity(self) -> dict[str, Any]:
        """Model id, revision, backend and decoding parameters: part of every cache key."""
        ...

    def generate(self, prompts: Sequence[PromptMessages]) -> list[str | BackendError]: ...

    def score(self, prompts: Sequence[PromptMessages], choices: Sequence[str]) -> list[ScoreResult | BackendError]: ...


def token_budget_batches(lengths: Sequence[int], batch_tokens: int, max_batch: int = 256) -> list[list[int]]:
    """Length-bucketed batches of indices: sorted by length, each padded batch within ``batch_tokens``.

    A batch costs ``len(batch) × longest`` tokens once padded; a prompt longer than the budget
    gets a batch of its own.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        longest = lengths[index]  # ascending order: the newcomer is the longest so far
        if current and ((len(current) + 1) * longest > batch_tokens or len(current) >= max_batch):
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches
