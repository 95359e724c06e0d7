"""The third-party AutoJudge packages (the ``interop`` extra) as judges of our formats' compatibility.

``autojudge_base`` reads NLTK's English stopword list when it is imported, and tests never go online:
``autojudge()`` points NLTK at a temporary ``nltk_data`` holding the copy the project ships
(app/evaluation/data/nltk_english_stopwords.txt), then imports the packages. Absent in CI (``CI``
set), a test that needs them fails; elsewhere it skips, like the DL19 data.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

STOPWORDS = Path(__file__).resolve().parents[1] / "app" / "evaluation" / "data" / "nltk_english_stopwords.txt"
PACKAGES = ("autojudge_base", "autojudge_evaluate")
_nltk_data: Path | None = None


def nltk_data_dir() -> Path:
    """A temporary ``nltk_data`` with ``corpora/stopwords/english``, made once per process and set as NLTK_DATA."""
    global _nltk_data
    if _nltk_data is None:
        root = Path(tempfile.mkdtemp(prefix="rubric-nltk-"))
        atexit.register(shutil.rmtree, root, True)
        english = root / "corpora" / "stopwords" / "english"
        english.parent.mkdir(parents=True)
        shutil.copyfile(STOPWORDS, english)
        _nltk_data = root
    os.environ["NLTK_DATA"] = str(_nltk_data)
    if importlib.util.find_spec("nltk") is not None:  # nltk reads NLTK_DATA at its own import only
        import nltk

        if str(_nltk_data) not in nltk.data.path:
            nltk.data.path.insert(0, str(_nltk_data))
    return _nltk_data


def autojudge() -> ModuleType:
    """``autojudge_base``, imported offline; fail in CI and skip elsewhere when the extra is not installed."""
    missing = [name for name in PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        message = f"{', '.join(missing)} not installed (pip install -e '.[interop]')"
        if os.environ.get("CI"):
            pytest.fail(f"{message}: CI must run the interop tests")
        pytest.skip(message)
    nltk_data_dir()
    import autojudge_base

    return autojudge_base
