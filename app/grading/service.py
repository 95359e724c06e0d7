"""Grading requests: one description of a grader, used alike by the CLI, the worker and the web app."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

from sqlalchemy.orm import Session

from app.errors import Invalid
from app.grading.backends.base import BackendError
from app.grading.engine import Cell, CellScope, plan_cells
from app.grading.methods import GradingMethod, Mode, PromptGrader
from app.grading.models import MINILM, SMOLLM2, ModelNotFound
from app.grading.prompts import (
    DEFAULT_PROMPT_CLASS,
    PromptClass,
    get_prompt_class,
    prompt_class_names,
    register_custom,
)
from app.models import Collection, RubricVersion
from app.rubrics.service import latest_version, version_by_number

BackendName = Literal["hf", "openai", "similarity", "hf-qa"]
BACKENDS: tuple[str, ...] = ("hf", "openai", "similarity", "hf-qa")
MODES: tuple[str, ...] = ("generate", "score")
DEFAULT_BACKEND: BackendName = "similarity"
DEFAULT_MODELS: dict[str, str] = {
    "hf": SMOLLM2,
    "similarity": MINILM,
    "openai": "gpt-4o-mini",
    "hf-qa": "deepset/roberta-base-squad2",
}


# the similarity grader compares the passage with the query (direct), a nugget, or else a question
SIMILARITY_PROMPT_TYPES = {"DirectSimilarity": "direct_grading", "NuggetSimilarity": "nugget"}


@dataclass(frozen=True)
class GraderSpec:
    """Everything that picks and configures a grader; JSON-serialisable (jobs store it as a parameter)."""

    prompt_class: str = DEFAULT_PROMPT_CLASS
    backend: BackendName = DEFAULT_BACKEND
    model: str | None = None
    mode: Mode = "score"
    device: str = "cpu"
    dtype: str = "auto"
    batch_tokens: int = 8192
    max_tokens: int = 512
    num_beams: int | None = None
    max_new_tokens: int | None = None
    base_url: str | None = None
    endpoint: Literal["chat", "completions"] = "chat"
    concurrency: int = 8
    seed: int | None = None
    timeout: float = 120.0  # openai: seconds per request
    max_retries: int = 6  # openai: retries of a rate-limited, timed-out or 5xx request
    max_consecutive_errors: int = 20  # fail-fast: stop after this many identical cell errors in a row (0: never)
    json_mode: bool = False
    custom_prompt: str | None = None
    custom_parser: str = "rating"
    # Set when the model came from the web's allowlist: messages name this label, never the path.
    model_label: str | None = None

    @property
    def model_ref(self) -> str:
        return self.model or DEFAULT_MODELS[self.backend]

    @property
    def model_name(self) -> str:
        """How messages name the model: its configured label, else what the operator gave."""
        return self.model_label or self.model_ref

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GraderSpec:
        """From a stored job's parameters; keys this version does not know are ignored."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def prompt_type(self) -> str:
        if self.backend == "similarity":  # its prompt class names only what it compares the passage with
            return SIMILARITY_PROMPT_TYPES.get(self.prompt_class, "question")
        return str(self._prompt().prompt_type)

    def _prompt(self) -> PromptClass:
        if self.custom_prompt:
            return register_custom(Path(self.custom_prompt), self.custom_parser, self.prompt_class or None)
        return get_prompt_class(self.prompt_class)


# Bounds of the run options (the CLI's `grade`/`generate` options and the web launch form take the same).
SEED_MAX = 2**31 - 1  # the servers take a 32-bit seed
MAX_NEW_TOKENS_MAX = 131_072
TIMEOUT_MIN, TIMEOUT_MAX = 1.0, 3600.0
MAX_RETRIES_MAX = 20
MAX_CONSECUTIVE_ERRORS_MAX = 1_000_000


def validate_run_options(spec: GraderSpec) -> None:
    """Refuse a seed, output-token budget, timeout or retry count outside its bounds (``Invalid``).

    A spec comes from the CLI, the web form or a stored job; each is checked here once more.
    """
    if spec.seed is not None and not 0 <= spec.seed <= SEED_MAX:
        raise Invalid(f"seed: between 0 and {SEED_MAX}, not {spec.seed}")
    if spec.max_new_tokens is not None and not 1 <= spec.max_new_tokens <= MAX_NEW_TOKENS_MAX:
        raise Invalid(f"max_new_tokens: between 1 and {MAX_NEW_TOKENS_MAX}, not {spec.max_new_tokens}")
    if not TIMEOUT_MIN <= spec.timeout <= TIMEOUT_MAX:  # also refuses NaN
        raise Invalid(f"timeout: between {TIMEOUT_MIN:g} and {TIMEOUT_MAX:g} seconds, not {spec.timeout}")
    if not 0 <= spec.max_retries <= MAX_RETRIES_MAX:
        raise Invalid(f"max_retries: between 0 and {MAX_RETRIES_MAX}, not {spec.max_retries}")
    if not 0 <= spec.max_consecutive_errors <= MAX_CONSECUTIVE_ERRORS_MAX:
        raise Invalid(
            f"max_consecutive_errors: between 0 and {MAX_CONSECUTIVE_ERRORS_MAX}, not {spec.max_consecutive_errors}"
        )


def validate_spec(spec: GraderSpec) -> None:
    """Refuse a grader that cannot be built (an ``Invalid`` naming the field), without loading a model.

    Launch and estimate call this, so a job never starts with a spec its batches cannot build.
    """
    validate_run_options(spec)
    if spec.backend not in BACKENDS:
        raise Invalid(f"backend: {spec.backend!r} is not one of {', '.join(BACKENDS)}")
    if spec.mode not in MODES:
        raise Invalid(f"mode: {spec.mode!r} is not one of {', '.join(MODES)}")
    if spec.backend != "similarity":  # similarity reads only DirectSimilarity from the prompt class
        _validate_prompt(spec)
    try:
        build_method(spec)  # resolves the model reference; loads nothing
    except ModelNotFound:
        raise Invalid(f"model: {spec.model_name!r} was not found") from None


def validate_generator(spec: GraderSpec) -> None:
    """Refuse a drafting model that cannot be built (an ``Invalid`` naming the field); loads nothing."""
    validate_run_options(spec)
    if spec.backend not in ("hf", "openai"):
        raise Invalid(f"backend: drafting takes hf or openai, not {spec.backend!r}")
    try:
        build_backend(spec)
    except ModelNotFound:
        raise Invalid(f"model: {spec.model_name!r} was not found") from None


def _validate_prompt(spec: GraderSpec) -> None:
    if spec.custom_prompt is None and spec.prompt_class not in prompt_class_names():
        raise Invalid(f"prompt_class: unknown prompt class {spec.prompt_class!r}")
    if spec.mode == "score" and spec.custom_prompt is None and not spec._prompt().score_choices:
        raise Invalid(
            f"mode: {spec.prompt_class} answers in free text; score mode needs a rating or yes/no prompt class"
        )


def public_error(spec: GraderSpec, error: BaseException) -> str:
    """What a job message may say about a failure, seen by every viewer.

    A backend's own refusal (an HTTP error of an API, a missing answer token) is shown as it is;
    anything else (a model that failed to load, whose text may quote a file) is named by type and
    model label only, and the details go to the worker's log.
    """
    if isinstance(error, BackendError | Invalid):
        return f"{type(error).__name__}: {error}"
    return f"{type(error).__name__} with model {spec.model_name!r} (details in the worker log)"


def build_method(spec: GraderSpec) -> GradingMethod:
    """The grading method a spec describes. Heavy libraries load on first use, not here."""
    if spec.backend == "similarity":
        from app.grading.similarity import SimilarityGrader

        return SimilarityGrader(spec.model_ref, prompt_type=spec.prompt_type, device=spec.device)
    return PromptGrader(spec._prompt(), build_backend(spec), spec.mode, spec.json_mode)


def build_backend(spec: GraderSpec) -> Any:
    """The LLM backend of a spec (hf, hf-qa or openai), not yet loaded."""
    if spec.backend == "hf-qa":
        from app.grading.backends.qa import QuestionAnsweringBackend

        return QuestionAnsweringBackend(spec.model_ref, device=spec.device, max_tokens=spec.max_tokens)
    if spec.backend == "openai":
        from app.grading.backends.openai_http import OpenAIBackend

        return OpenAIBackend(
            spec.model_ref,
            base_url=spec.base_url,
            endpoint=spec.endpoint,
            max_tokens=spec.max_tokens,
            max_output_tokens=spec.max_new_tokens or 64,
            seed=spec.seed,
            concurrency=spec.concurrency,
            timeout=spec.timeout,
            max_retries=spec.max_retries,
            max_consecutive_errors=spec.max_consecutive_errors,
        )
    from app.grading.backends.hf import HuggingFaceBackend

    return HuggingFaceBackend(
        spec.model_ref,
        device=spec.device,
        dtype=spec.dtype,
        max_tokens=spec.max_tokens,
        batch_tokens=spec.batch_tokens,
        num_beams=spec.num_beams,
        max_new_tokens=spec.max_new_tokens,
    )


def rubric_version(session: Session, collection: Collection, number: int | None) -> RubricVersion | None:
    """The published version ``number``, or the newest published one."""
    if number is None:
        return latest_version(session, collection)
    return version_by_number(session, collection, number)


def plan_for(
    session: Session, collection: Collection, spec: GraderSpec, version_number: int | None, scope: CellScope
) -> list[Cell]:
    version = rubric_version(session, collection, version_number)
    if version is None and spec.prompt_type != "direct_grading":
        raise Invalid(f"collection {collection.name!r} has no test bank; import one with --bank or generate one")
    return plan_cells(session, collection, spec.prompt_type, version, scope)
