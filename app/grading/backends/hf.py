"""Hugging Face transformers backend: seq2seq (T5/FLAN-T5) and causal LMs, on CPU or CUDA.

torch and transformers are imported when the model is first used, never at module import, so
importing this module costs nothing in the web process and nothing in a worker before fork.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from app.grading import progress
from app.grading.backends.base import BackendError, ScoreResult, token_budget_batches
from app.grading.models import ModelSource, converted_cache_dir, offline_if_local, resolve
from app.grading.prompts import PromptMessages

T = TypeVar("T")
_CHOICE_VARIANTS = ("{}", " {}", "▁{}")


class HFTokenizer:
    """Adapter from a transformers tokenizer to the truncation protocol of ``app.grading.prompts``."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(ids)))

    def num_special_tokens(self) -> int:
        return int(self._tokenizer.num_special_tokens_to_add())


def is_out_of_memory(error: BaseException) -> bool:
    import torch

    return isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error).lower()


class HuggingFaceBackend:
    """A local model. ``generate`` reproduces the reference; ``score`` reads one next-token distribution."""

    name = "hf"

    def __init__(
        self,
        model: str,
        *,
        device: str = "cpu",
        dtype: str = "auto",
        max_tokens: int = 512,
        batch_tokens: int = 8192,
        num_beams: int | None = None,
        max_new_tokens: int | None = None,
        revision: str | None = None,
        chat_template: bool = True,
    ) -> None:
        self.source: ModelSource = resolve(model, revision)
        self.device = device
        self.dtype_name = dtype
        self.max_tokens = max_tokens
        self.batch_tokens = batch_tokens
        self._num_beams = num_beams
        self._max_new_tokens = max_new_tokens
        self.use_chat_template = chat_template
        self.calls = 0
        self.oom_splits = 0
        self._model: Any = None
        self._tokenizer: Any = None
        self.is_seq2seq = False

    @classmethod
    def from_loaded(cls, label: str, model: Any, tokenizer: Any, **options: Any) -> HuggingFaceBackend:
        """Wrap a model and tokenizer already in memory (e.g. built from a config, or fine-tuned in-process)."""
        backend = cls(label, **options)
        backend._model = model.to(backend.device).eval()
        backend.is_seq2seq = bool(getattr(model.config, "is_encoder_decoder", False))
        if not backend.is_seq2seq:
            tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        backend._tokenizer = tokenizer
        return backend

    # ---- loading -------------------------------------------------------------------------

    def _torch_dtype(self) -> Any:
        import torch

        if self.dtype_name == "auto":
            return torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[self.dtype_name]

    def _ensure_loaded(self) -> None:
        if self._model is not None:
            return
        import transformers

        offline_if_local(self.source)
        location, gguf = self._weights_location()
        kwargs: dict[str, Any] = {"revision": self.source.revision} if self.source.revision and not gguf else {}
        if gguf:
            kwargs["gguf_file"] = gguf
        config = transformers.AutoConfig.from_pretrained(location, **kwargs)
        self.is_seq2seq = bool(getattr(config, "is_encoder_decoder", False))
        model_class = transformers.AutoModelForSeq2SeqLM if self.is_seq2seq else transformers.AutoModelForCausalLM
        tokenizer = transformers.AutoTokenizer.from_pretrained(location, **kwargs)
        model: Any = model_class.from_pretrained(location, dtype=self._torch_dtype(), **kwargs)
        self._model = model.to(self.device).eval()
        if not self.is_seq2seq:
            tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        self._tokenizer = tokenizer

    def _weights_location(self) -> tuple[str, str | None]:
        """A de-quantised GGUF is converted once into a safetensors cache, then loaded from there."""
        if self.source.gguf_file is None:
            return self.source.location, None
        cache = converted_cache_dir(self.source)
        if not (cache / "config.json").exists():
            _convert_gguf(self.source, cache)
        return str(cache), None

    @property
    def tokenizer(self) -> HFTokenizer:
        self._ensure_loaded()
        return HFTokenizer(self._tokenizer)

    @property
    def max_prompt_tokens(self) -> int:
        """Room for the rendered prompt once the chat template has wrapped it."""
        self._ensure_loaded()
        return self.max_tokens - self._chat_overhead()

    def _chat_overhead(self) -> int:
        if not self._uses_chat():
            return 0
        return len(self._tokenizer(self._wrap(PromptMessages(text="")), add_special_tokens=False)["input_ids"])

    def identity(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "model": self.source.ref,
            "revision": self.source.revision,
            "dtype": self.dtype_name,
            "max_tokens": self.max_tokens,
            # as requested: None means the architecture's default (identity must not load the model)
            "num_beams": self._num_beams,
            "max_new_tokens": self._max_new_tokens,
            "chat_template": self.use_chat_template,
        }

    @property
    def num_beams(self) -> int:
        """The reference's text2text pipeline used 5 beams; causal LMs default to greedy."""
        if self._num_beams is not None:
            return self._num_beams
        self._ensure_loaded()
        return 5 if self.is_seq2seq else 1

    @property
    def max_new_tokens(self) -> int:
        if self._max_new_tokens is not None:
            return self._max_new_tokens
        self._ensure_loaded()
        return 512 if self.is_seq2seq else 32  # seq2seq: the reference's max_length=512

    # ---- prompts ---------------------------------------------------------------------------

    def _uses_chat(self) -> bool:
        return self.use_chat_template and not self.is_seq2seq and bool(getattr(self._tokenizer, "chat_template", None))

    def _wrap(self, prompt: PromptMessages) -> str:
        if not self._uses_chat():
            return prompt.text
        messages = [{"role": "user", "content": prompt.text}]
        if prompt.system is not None:
            messages = [{"role": "system", "content": prompt.system}, {"role": "user", "content": prompt.user or ""}]
        return str(self._tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))

    def _encode(self, texts: list[str]) -> Any:
        # A chat template already holds the special tokens; a seq2seq encoder wants its </s>.
        encoded = self._tokenizer(texts, padding=True, return_tensors="pt", add_special_tokens=not self._uses_chat())
        return {name: tensor.to(self.device) for name, tensor in encoded.items()}

    # ---- batching ------------------------------------------------------------------------------

    def _batched(
        self, prompts: Sequence[PromptMessages], run: Callable[[list[str]], list[T]]
    ) -> list[T | BackendError]:
        self._ensure_loaded()
        texts = [self._wrap(p) for p in prompts]
        lengths = [len(ids) for ids in self._tokenizer(texts, add_special_tokens=False)["input_ids"]]
        results: list[T | BackendError | None] = [None] * len(texts)
        advance = progress.tracker(len(texts))
        for batch in token_budget_batches(lengths, self.batch_tokens):
            for index, result in zip(batch, self._split_on_oom(run, [texts[i] for i in batch]), strict=True):
                results[index] = result
            advance(len(batch))
        self.calls += len(texts)
        return [r if r is not None else BackendError("no result") for r in results]

    def _split_on_oom(self, run: Callable[[list[str]], Sequence[Any]], texts: list[str]) -> list[Any]:
        """Run a batch; on out-of-memory, halve it and retry each half, down to single prompts."""
        import torch

        try:
            with torch.inference_mode():
                return list(run(texts))
        except (RuntimeError, MemoryError) as error:
            if not is_out_of_memory(error):
                raise
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            if len(texts) == 1:
                return [BackendError(f"out of memory on a single prompt: {error}")]
            self.oom_splits += 1
            middle = len(texts) // 2
            return self._split_on_oom(run, texts[:middle]) + self._split_on_oom(run, texts[middle:])

    # ---- the two modes -------------------------------------------------------------------------

    def generate(self, prompts: Sequence[PromptMessages]) -> list[str | BackendError]:
        return self._batched(prompts, self._generate_batch)

    def _generate_batch(self, texts: list[str]) -> list[str]:
        encoded = self._encode(texts)
        beams = self.num_beams
        output = self._model.generate(
            **encoded,
            num_beams=beams,
            early_stopping=beams > 1,
            do_sample=False,
            max_new_tokens=self.max_new_tokens,
            pad_token_id=self._tokenizer.pad_token_id,
        )
        if not self.is_seq2seq:
            output = output[:, encoded["input_ids"].shape[1] :]
        return [str(text).strip() for text in self._tokenizer.batch_decode(output, skip_special_tokens=True)]

    def score(self, prompts: Sequence[PromptMessages], choices: Sequence[str]) -> list[ScoreResult | BackendError]:
        self._ensure_loaded()
        token_ids = {choice: self._choice_token_ids(choice) for choice in choices}
        return self._batched(prompts, lambda texts: self._score_batch(texts, token_ids))

    def _choice_token_ids(self, choice: str) -> list[int]:
        """Every single-token spelling of a choice ("4", " 4", "▁4"; "Yes", " yes", …)."""
        spellings = {choice, choice.lower(), choice.capitalize()}
        ids: set[int] = set()
        for spelling in spellings:
            for variant in _CHOICE_VARIANTS:
                encoded = self._tokenizer(variant.format(spelling), add_special_tokens=False)["input_ids"]
                if len(encoded) == 1 and encoded[0] != self._tokenizer.unk_token_id:
                    ids.add(int(encoded[0]))
        if not ids:
            raise BackendError(f"the tokenizer has no single token for the answer {choice!r}")
        return sorted(ids)

    def _next_token_logits(self, texts: list[str]) -> Any:
        import torch

        encoded = self._encode(texts)
        if self.is_seq2seq:
            start = self._model.config.decoder_start_token_id
            decoder_input = torch.full((len(texts), 1), start, dtype=torch.long, device=self.device)
            return self._model(**encoded, decoder_input_ids=decoder_input).logits[:, -1, :]
        mask = encoded["attention_mask"]
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # left padding must not shift positions
        return self._model(**encoded, position_ids=positions, logits_to_keep=1).logits[:, -1, :]

    def _score_batch(self, texts: list[str], token_ids: dict[str, list[int]]) -> list[ScoreResult]:
        probabilities = self._next_token_logits(texts).float().softmax(-1)
        per_choice = {c: probabilities[:, ids].sum(-1).tolist() for c, ids in token_ids.items()}
        results = []
        for row in range(len(texts)):
            mass = sum(per_choice[c][row] for c in token_ids)
            normalised = {c: (per_choice[c][row] / mass if mass > 0 else 0.0) for c in token_ids}
            results.append(ScoreResult(normalised, mass))
        return results


def _convert_gguf(source: ModelSource, cache: Path) -> None:
    """De-quantise a GGUF once and save it as safetensors; written to a temp dir, then renamed."""
    import transformers

    assert source.gguf_file is not None
    tokenizer = transformers.AutoTokenizer.from_pretrained(source.location, gguf_file=source.gguf_file)
    model = transformers.AutoModelForCausalLM.from_pretrained(source.location, gguf_file=source.gguf_file)
    model.hf_quantizer = None  # type: ignore[assignment]  # else save_pretrained refuses a "quantized" model
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    cache.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=cache.parent, prefix=cache.name + ".tmp"))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        staging.rename(cache)
    except OSError:
        if not (cache / "config.json").exists():  # a concurrent process may have won the rename
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def load_tokenizer(ref: str) -> HFTokenizer:
    """Only the tokenizer of a model (an HTTP backend truncates with it)."""
    import transformers

    source = resolve(ref)
    offline_if_local(source)
    if source.gguf_file is not None:
        cache = converted_cache_dir(source)
        if (cache / "config.json").exists():
            return HFTokenizer(transformers.AutoTokenizer.from_pretrained(str(cache)))
        return HFTokenizer(transformers.AutoTokenizer.from_pretrained(source.location, gguf_file=source.gguf_file))
    return HFTokenizer(transformers.AutoTokenizer.from_pretrained(source.location))
