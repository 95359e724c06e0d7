"""Extractive question answering (SQuAD2-style) for the extraction prompt classes.

The reference's ``question-answering`` pipeline fed ``{"question": pretext + question, "context":
passage}`` to a QA model; transformers 5 dropped that pipeline, so the span search is done here:
the best span (start ≤ end, at most ``max_answer_tokens`` long, inside the context) unless the
no-answer score (both pointers on the first token) beats it, in which case the answer is "".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.grading.backends.base import BackendError, ScoreResult
from app.grading.backends.hf import HFTokenizer
from app.grading.models import ModelSource, offline_if_local, resolve
from app.grading.prompts import PromptMessages


class QuestionAnsweringBackend:
    """A SQuAD2-style reader (e.g. deepset/roberta-base-squad2); ``generate`` returns the extracted span."""

    name = "hf-qa"
    question_answering = True  # PromptGrader hands it (question part, context) pairs

    def __init__(
        self,
        model: str,
        *,
        device: str = "cpu",
        max_tokens: int = 512,
        max_answer_tokens: int = 30,
        batch_size: int = 16,
    ) -> None:
        self.source: ModelSource = resolve(model)
        self.device = device
        self.max_tokens = max_tokens
        self.max_answer_tokens = max_answer_tokens
        self.batch_size = batch_size
        self.calls = 0
        self._model: Any = None
        self._tokenizer: Any = None

    @classmethod
    def from_loaded(cls, label: str, model: Any, tokenizer: Any, **options: Any) -> QuestionAnsweringBackend:
        backend = cls(label, **options)
        backend._model, backend._tokenizer = model.to(backend.device).eval(), tokenizer
        return backend

    def _ensure_loaded(self) -> None:
        if self._model is not None:
            return
        import transformers

        offline_if_local(self.source)
        self._tokenizer = transformers.AutoTokenizer.from_pretrained(self.source.location)
        model = transformers.AutoModelForQuestionAnswering.from_pretrained(self.source.location)
        self._model = model.to(self.device).eval()

    @property
    def tokenizer(self) -> HFTokenizer:
        self._ensure_loaded()
        return HFTokenizer(self._tokenizer)

    @property
    def max_prompt_tokens(self) -> int:
        return self.max_tokens

    def identity(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "model": self.source.ref,
            "revision": self.source.revision,
            "max_tokens": self.max_tokens,
            "max_answer_tokens": self.max_answer_tokens,
        }

    def score(self, prompts: Sequence[PromptMessages], choices: Sequence[str]) -> list[ScoreResult | BackendError]:
        return [BackendError("an extractive QA model has no grade tokens; use --mode generate")] * len(prompts)

    def generate(self, prompts: Sequence[PromptMessages]) -> list[str | BackendError]:
        self._ensure_loaded()
        self.calls += len(prompts)
        answers: list[str | BackendError] = []
        for start in range(0, len(prompts), self.batch_size):
            answers += self._answer(prompts[start : start + self.batch_size])
        return answers

    def _answer(self, prompts: Sequence[PromptMessages]) -> list[str]:
        import torch

        questions = [p.system or "" for p in prompts]
        contexts = [p.user or "" for p in prompts]
        encoded = self._tokenizer(
            questions, contexts, truncation="only_second", max_length=self.max_tokens, padding=True, return_tensors="pt"
        )
        inputs = {k: v.to(self.device) for k, v in encoded.items()}
        with torch.inference_mode():
            output = self._model(**inputs)
        return [
            self._best_span(encoded, i, output.start_logits[i].float(), output.end_logits[i].float())
            for i in range(len(prompts))
        ]

    def _best_span(self, encoded: Any, row: int, start: Any, end: Any) -> str:
        """argmax over start ≤ end < start + L inside the context of start + end; "" if no-answer wins."""
        import torch

        sequence = encoded.sequence_ids(row)
        in_context = torch.tensor([s == 1 for s in sequence], device=start.device)
        if not bool(in_context.any()):
            return ""
        masked_start = start.masked_fill(~in_context, float("-inf"))
        masked_end = end.masked_fill(~in_context, float("-inf"))
        scores = masked_start[:, None] + masked_end[None, :]
        n = scores.shape[0]
        allowed = torch.triu(torch.ones(n, n, dtype=torch.bool, device=start.device))
        allowed &= ~torch.triu(allowed, diagonal=self.max_answer_tokens)
        scores = scores.masked_fill(~allowed, float("-inf"))
        best = int(torch.argmax(scores))
        first, last = divmod(best, n)
        if float(start[0] + end[0]) > float(scores[first, last]):
            return ""  # SQuAD2: the no-answer score wins
        ids = encoded["input_ids"][row][first : last + 1]
        return str(self._tokenizer.decode(ids, skip_special_tokens=True)).strip()
