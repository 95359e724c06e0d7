"""Embedding-similarity grader: cosine of (item or query, passage) under a sentence encoder, mapped to 0-5.

Not an LLM judgement, and labelled so everywhere. It is the shipped default because, unlike the
tiny LLMs that fit in a PyPI wheel, it separates answering from unrelated passages (docs/models.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from app.grading import progress
from app.grading.methods import GraderConfig, Outcome, grader_identity
from app.grading.models import MINILM, ModelSource, offline_if_local, resolve
from app.grading.prompts import CellInput

# cos 0.1 or less → 0, cos 0.7 or more → 5, linear between (hand-set on answerable vs unrelated pairs)
COSINE_FLOOR = 0.1
COSINE_SPAN = 0.6
MAX_GRADE = 5


def grade_from_cosine(cosine: float) -> float:
    """E[grade] = clamp(5 · (cos − 0.1) / 0.6, 0, 5); the rating is its rounding."""
    return min(float(MAX_GRADE), max(0.0, MAX_GRADE * (cosine - COSINE_FLOOR) / COSINE_SPAN))


ENCODE_BATCH = 64  # texts per encoder call


class SimilarityGrader:
    """Mean-pooled, L2-normalised sentence embeddings; each distinct text is embedded once per process."""

    def __init__(
        self,
        model: str = MINILM,
        *,
        prompt_type: str = "question",
        device: str = "cpu",
        batch_size: int | None = None,
    ) -> None:
        self.source: ModelSource = resolve(model)
        self.prompt_type = prompt_type
        self.device = device
        self.batch_size = batch_size or ENCODE_BATCH
        self.calls = 0
        self._model: Any = None
        self._tokenizer: Any = None
        self._vectors: dict[str, Any] = {}

    @property
    def prompt_class(self) -> str:
        return {"direct_grading": "DirectSimilarity", "nugget": "NuggetSimilarity"}.get(self.prompt_type, "Similarity")

    def _template_hash(self) -> str:
        return hashlib.sha256(json.dumps([self.prompt_class, COSINE_FLOOR, COSINE_SPAN]).encode()).hexdigest()

    def config(self) -> GraderConfig:
        template_hash = self._template_hash()
        return GraderConfig(
            model=self.source.display,
            prompt_class=self.prompt_class,
            template_hash=template_hash,
            prompt_type=self.prompt_type,
            is_self_rated=True,
            options={"source": "rubric grade", "mode": "similarity", **self.identity()},
            identity=grader_identity(
                {**self.identity(), "mode": "similarity"},
                prompt_class=self.prompt_class,
                prompt_type=self.prompt_type,
                template_hash=template_hash,
            ),
        )

    def identity(self) -> dict[str, Any]:
        return {
            "backend": "similarity",
            "model": self.source.ref,
            "revision": self.source.revision,
            "template": self._template_hash(),
        }

    def key_material(self, cell: CellInput) -> list[Any]:
        probe = cell.query_text if self.prompt_type == "direct_grading" else cell.item_text
        return [probe, cell.passage_text]

    def _ensure_loaded(self) -> None:
        if self._model is not None:
            return
        import transformers

        offline_if_local(self.source)
        self._tokenizer = transformers.AutoTokenizer.from_pretrained(self.source.location)
        self._model = transformers.AutoModel.from_pretrained(self.source.location).to(self.device).eval()

    def _embed(self, texts: Sequence[str]) -> None:
        import torch

        missing = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        advance = progress.tracker(len(missing))  # encoding is the work; the cosines after it are instant
        for start in range(0, len(missing), self.batch_size):
            batch = missing[start : start + self.batch_size]
            encoded = self._tokenizer(batch, padding=True, truncation=True, max_length=256, return_tensors="pt")
            encoded = {k: v.to(self.device) for k, v in encoded.items()}
            with torch.inference_mode():
                hidden = self._model(**encoded).last_hidden_state
            mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9), dim=-1)
            self._vectors.update(zip(batch, pooled.cpu(), strict=True))
            self.calls += len(batch)
            advance(len(batch))

    def grade(self, cells: Sequence[CellInput]) -> list[Outcome]:
        self._ensure_loaded()
        pairs = [(self.key_material(c)[0], c.passage_text) for c in cells]
        self._embed([text for pair in pairs for text in pair if text.strip()])
        return [self._outcome(probe, passage) for probe, passage in pairs]

    def _outcome(self, probe: str, passage: str) -> Outcome:
        if not passage.strip() or not probe.strip():
            return Outcome(error="empty passage" if not passage.strip() else "empty item text")
        cosine = float(self._vectors[probe] @ self._vectors[passage])
        expected = grade_from_cosine(cosine)
        rating = int(round(expected))
        return Outcome(raw_answer=f"{cosine:.6f}", self_rating=rating, correct=rating > 0, expected_grade=expected)
