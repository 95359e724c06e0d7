"""The grading engine on the real shipped model (SmolLM2-135M-Instruct, CPU, fp32).

These tests check mechanics (parsing, ranges, caching, dedup, batching, failure handling), never
grading quality: a 135M model's grades are noise (docs/models.md).
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch
from sqlalchemy import func, select

from app.collections.service import get_collection
from app.evaluation.parsing import RATING_MATCHER, parse_self_rating
from app.grading.backends.hf import HuggingFaceBackend
from app.grading.engine import Cell, CellScope, grade_cells, plan_cells
from app.grading.methods import PromptGrader
from app.grading.prompts import CellInput, get_prompt_class
from app.models import Grade, GradeCache, PoolEntry
from app.rubrics.service import latest_version
from tests.conftest import Database

SELF_RATED = get_prompt_class("QuestionSelfRatedUnanswerablePromptWithChoices")


def _cells(db: Database, n_entries: int = 2) -> list[Cell]:
    with db.session() as session:
        collection = get_collection(session, "sample")
        entries = frozenset(session.scalars(select(PoolEntry.id).order_by(PoolEntry.id).limit(n_entries)))
        return plan_cells(
            session, collection, "question", latest_version(session, collection), CellScope(pool_entry_pks=entries)
        )


def _grade(db: Database, grader: PromptGrader, cells: list[Cell]) -> tuple[int, dict[str, int]]:
    before = grader.calls
    with db.session() as session:
        report = grade_cells(session, grader, cells, batch_cells=4, after_batch=lambda _r: session.commit())
    return grader.calls - before, report.as_dict()


def _grades(db: Database) -> list[Grade]:
    with db.session() as session:
        return list(session.scalars(select(Grade).order_by(Grade.pool_entry_pk, Grade.position)))


def test_score_mode_stores_a_distribution_per_cell(sample_db: Database, smollm2: HuggingFaceBackend) -> None:
    cells = _cells(sample_db)
    calls, report = _grade(sample_db, PromptGrader(SELF_RATED, smollm2, "score"), cells)
    assert calls == len(cells) == 6 and report["graded"] == 6 and report["errors"] == 0
    for grade in _grades(sample_db):
        assert grade.probabilities is not None and set(grade.probabilities) == {"0", "1", "2", "3", "4", "5"}
        assert sum(grade.probabilities.values()) == pytest.approx(1.0)
        assert 0 < (grade.valid_mass or 0) <= 1
        assert grade.self_rating == int(max(grade.probabilities, key=grade.probabilities.__getitem__))
        assert grade.expected_grade == pytest.approx(sum(int(k) * p for k, p in grade.probabilities.items()))
        assert grade.raw_answer == str(grade.self_rating) and grade.cache_key


def test_generate_mode_parses_like_the_reference(sample_db: Database, smollm2: HuggingFaceBackend) -> None:
    cells = _cells(sample_db, 1)
    _grade(sample_db, PromptGrader(SELF_RATED, smollm2, "generate"), cells)
    grades = _grades(sample_db)
    assert len(grades) == 3
    for grade in grades:
        assert grade.raw_answer
        assert grade.self_rating == parse_self_rating(grade.raw_answer, RATING_MATCHER)
        assert grade.probabilities is None


def test_score_argmax_agrees_with_the_digit_generate_writes(sample_db: Database, smollm2: HuggingFaceBackend) -> None:
    cells = _cells(sample_db, 3)
    prompts = [SELF_RATED.render(c.input, smollm2.tokenizer, smollm2.max_prompt_tokens) for c in cells]
    scores = smollm2.score(prompts, SELF_RATED.score_choices)
    texts = smollm2.generate(prompts)
    agree = 0
    for score, text in zip(scores, texts, strict=True):
        assert not isinstance(score, Exception) and isinstance(text, str)
        digit = re.search(r"[0-5]", text)
        agree += int(
            digit is not None and digit.group() == max(score.probabilities, key=score.probabilities.__getitem__)
        )
    assert agree >= 0.6 * len(cells)


def test_rerun_with_a_warm_cache_makes_zero_model_calls(sample_any_db: Database, smollm2: HuggingFaceBackend) -> None:
    cells = _cells(sample_any_db)
    first_calls, _ = _grade(sample_any_db, PromptGrader(SELF_RATED, smollm2, "score"), cells)
    snapshot = [(g.pool_entry_pk, g.item_id, g.self_rating) for g in _grades(sample_any_db)]
    calls, report = _grade(sample_any_db, PromptGrader(SELF_RATED, smollm2, "score"), cells)
    assert first_calls == 6 and calls == 0 and report["cached"] == 6
    assert [(g.pool_entry_pk, g.item_id, g.self_rating) for g in _grades(sample_any_db)] == snapshot
    with sample_any_db.session() as session:
        assert session.scalar(select(func.count()).select_from(Grade)) == 6


def test_editing_one_question_regrades_only_its_cells(sample_db: Database, smollm2: HuggingFaceBackend) -> None:
    cells = _cells(sample_db)
    grader = PromptGrader(SELF_RATED, smollm2, "score")
    _grade(sample_db, grader, cells)
    edited_item = cells[0].item_id
    edited = [
        replace(c, input=replace(c.input, item_text="What does the dance tell other bees?"))
        if c.item_id == edited_item
        else c
        for c in cells
    ]
    calls, report = _grade(sample_db, grader, edited)
    assert calls == 2 and report["cached"] == 4  # that question × the two passages


def test_identical_prompts_are_graded_once(sample_db: Database, smollm2: HuggingFaceBackend) -> None:
    base = _cells(sample_db, 2)
    twin = [replace(base[3], input=base[0].input)]  # another pool entry with the very same texts
    grader = PromptGrader(SELF_RATED, smollm2, "score")
    calls, report = _grade(sample_db, grader, [base[0], *twin])
    assert calls == 1 and report["deduplicated"] == 1
    ratings = {g.pool_entry_pk: g.self_rating for g in _grades(sample_db)}
    assert ratings[base[0].pool_entry_pk] == ratings[twin[0].pool_entry_pk]


def test_batched_scores_equal_single_scores(smollm2: HuggingFaceBackend) -> None:
    texts = ["Water boils at 100 °C.", "Paris is in France and has the Eiffel Tower, built in 1889.", "Cats purr."]
    prompts = [
        SELF_RATED.render(CellInput("q", "When was the Eiffel Tower built?", t), smollm2.tokenizer, 300) for t in texts
    ]
    batched = smollm2.score(prompts, SELF_RATED.score_choices)
    single = [smollm2.score([p], SELF_RATED.score_choices)[0] for p in prompts]
    for b, s in zip(batched, single, strict=True):
        assert not isinstance(b, Exception) and not isinstance(s, Exception)
        for choice in SELF_RATED.score_choices:
            assert b.probabilities[choice] == pytest.approx(s.probabilities[choice], abs=2e-3)


def test_out_of_memory_splits_the_batch(smollm2: HuggingFaceBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    prompts = [
        SELF_RATED.render(CellInput("q", "Why?", f"Reason number {i}."), smollm2.tokenizer, 300) for i in range(4)
    ]
    expected = smollm2.score(prompts, SELF_RATED.score_choices)
    model = smollm2._model
    real_forward = model.forward

    def forward_that_fits_one(*args: object, **kwargs: object) -> object:
        input_ids = kwargs.get("input_ids")
        if input_ids is not None and input_ids.shape[0] > 1:  # type: ignore[attr-defined]
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", forward_that_fits_one)
    splits = smollm2.oom_splits
    results = smollm2.score(prompts, SELF_RATED.score_choices)
    assert smollm2.oom_splits - splits == 3  # 4 → 2+2 → 1+1+1+1
    for got, want in zip(results, expected, strict=True):
        assert not isinstance(got, Exception) and not isinstance(want, Exception)
        assert got.probabilities["1"] == pytest.approx(want.probabilities["1"], abs=2e-3)

    monkeypatch.setattr(
        model, "forward", lambda *a, **k: (_ for _ in ()).throw(torch.cuda.OutOfMemoryError("out of memory"))
    )
    failed = smollm2.score(prompts[:2], SELF_RATED.score_choices)
    assert all(isinstance(r, Exception) and "out of memory" in str(r) for r in failed)


def test_bad_cells_get_a_recorded_error_and_the_rest_is_graded(
    sample_db: Database, smollm2: HuggingFaceBackend
) -> None:
    cells = _cells(sample_db, 1)
    bad = [
        replace(cells[0], input=replace(cells[0].input, passage_text="   ")),
        replace(cells[1], input=replace(cells[1].input, item_text="why " * 600)),
    ]
    calls, report = _grade(sample_db, PromptGrader(SELF_RATED, smollm2, "score"), [*bad, cells[2]])
    assert calls == 1 and report["errors"] == 2
    errors = {g.position: g.error for g in _grades(sample_db)}
    assert "empty passage" in str(errors[0]) and "too long" in str(errors[1]) and errors[2] is None
    with sample_db.session() as session:
        assert session.scalar(select(func.count()).select_from(GradeCache)) == 1  # errors are never cached


def test_malformed_json_from_the_model_is_a_cell_error(smollm2: HuggingFaceBackend) -> None:
    short = HuggingFaceBackend("smollm2", dtype="float32", max_tokens=384, max_new_tokens=3)
    short._model, short._tokenizer = smollm2._model, smollm2._tokenizer  # share the loaded weights
    grader = PromptGrader(SELF_RATED, short, "generate", json_mode=True)
    outcomes = grader.grade([CellInput("q", "Why?", "Because of gravity.")])
    assert outcomes[0].error is not None and "JSON" in outcomes[0].error
    assert outcomes[0].raw_answer  # the text that failed to parse is kept
