"""A grader is everything that changes its grades: another setup is another grader row, never an overwrite.

The two collisions of issue 17, on both databases, graded as ``rubric grade`` grades (the engine)
against the local OpenAI-compatible server that serves the shipped SmolLM2 model:
(a) one ``--model``, ``--endpoint chat`` then ``--endpoint completions``;
(b) the HF backend's ``smollm2`` score grades, then ``--backend openai --model smollm2``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app.collections.graders import grader_coverage, set_primary_grader
from app.collections.queries import GraderRef
from app.collections.service import ensure_collection, get_collection, import_interchange
from app.config import get_settings
from app.grading.backends.hf import HuggingFaceBackend
from app.grading.engine import CellScope, ensure_method_grader, grade_cells
from app.grading.methods import GradingMethod, PromptGrader
from app.grading.prompts import get_prompt_class
from app.grading.service import GraderSpec, build_method, plan_for
from app.jobs.launch import collection_grader
from app.models import Grade, Grader, PoolEntry
from tests.conftest import Database
from tests.grading.openai_server import ServerState, serve
from tests.helpers import write_jsonl
from tests.jobs.helpers import SMOLLM2_SCORE, launch, wait_job

SELF_RATED = "QuestionSelfRatedUnanswerablePromptWithChoices"
RANKING = {"method": "s", "paragraphId": "p1", "queryId": "q1", "rank": 1, "score": 1.0}


@pytest.fixture(scope="module")
def server(smollm2: HuggingFaceBackend) -> Iterator[tuple[str, ServerState]]:
    with serve(smollm2) as running:
        yield running


@pytest.fixture(autouse=True)
def _embedded(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from app.jobs.service import _method

    monkeypatch.delenv("RUBRIC_REDIS_URL", raising=False)
    get_settings.cache_clear()
    _method.cache_clear()  # each test's worker builds its own methods (call counters)
    yield
    _method.cache_clear()


def _openai(server: tuple[str, ServerState], **options: Any) -> GraderSpec:
    spec = GraderSpec(
        backend="openai", model="smollm2", base_url=server[0], prompt_class=SELF_RATED, mode="score", concurrency=2
    )
    return replace(spec, **options)


def _one_query(db: Database) -> CellScope:
    """One pool entry: a handful of cells, enough to see an overwrite."""
    with db.session() as session:
        entries = session.scalars(select(PoolEntry.id).order_by(PoolEntry.id).limit(1)).all()
    return CellScope(pool_entry_pks=frozenset(entries))


def _grades(db: Database) -> dict[int, list[tuple[Any, ...]]]:
    """grader id → its grade rows as plain tuples (what an overwrite would change)."""
    found: dict[int, list[tuple[Any, ...]]] = {}
    with db.session() as session:
        for g in session.scalars(select(Grade).order_by(Grade.grader_pk, Grade.pool_entry_pk, Grade.item_id)):
            row = (g.pool_entry_pk, g.item_id, g.self_rating, g.probabilities, g.error, g.cache_key)
            found.setdefault(g.grader_pk, []).append(row)
    return found


def _graders(db: Database) -> list[Grader]:
    with db.session() as session:
        return list(session.scalars(select(Grader).order_by(Grader.id)))


def _grade(db: Database, spec: GraderSpec, method: GradingMethod | None = None) -> tuple[int, int]:
    """Grade one pool entry's cells as ``rubric grade`` does (engine, no worker): (grader id, model calls)."""
    method = method or build_method(spec)
    before = method.calls
    with db.session() as session:
        collection = get_collection(session, "sample")
        cells = plan_for(session, collection, spec, None, _one_query(db))
        report = grade_cells(session, method, cells, after_batch=lambda _r: session.commit())
        grader = ensure_method_grader(session, method)
        session.commit()
    assert report.errors == 0, report.error_samples
    return grader, method.calls - before


def _run(db: Database, spec: GraderSpec) -> tuple[int, int]:
    """A grading job (embedded worker): (the grader id the job recorded, the job's model calls)."""
    job = wait_job(db, launch(db, spec, scope=_one_query(db)))
    assert job.state == "done" and job.errors == 0, job.message
    return int(job.params["grader_id"]), job.model_calls


def _labels(db: Database) -> list[str]:
    with db.session() as session:
        return [c.label for c in grader_coverage(session, get_collection(session, "sample"))]


def test_a_completions_run_never_overwrites_the_chat_grades(
    sample_any_db: Database, server: tuple[str, ServerState]
) -> None:
    chat, calls = _grade(sample_any_db, _openai(server, endpoint="chat"))
    assert calls > 0
    before = _grades(sample_any_db)
    completions, _ = _grade(sample_any_db, _openai(server, endpoint="completions"))
    after = _grades(sample_any_db)
    assert completions != chat and len(_graders(sample_any_db)) == 2
    assert after[chat] == before[chat]  # every chat grade intact
    assert len(after[completions]) == len(before[chat])
    rows = {g.id: g for g in _graders(sample_any_db)}
    assert (rows[chat].identity["endpoint"], rows[completions].identity["endpoint"]) == ("chat", "completions")
    host = server[0].split("//")[1].split("/")[0]
    assert rows[chat].identity["base_url"] == host  # the host only, never a path or a key
    chat_label, completions_label = _labels(sample_any_db)
    assert "openai chat score @ " + host in chat_label and "openai completions score" in completions_label


def test_openai_smollm2_never_replaces_the_hf_smollm2_grades(
    sample_any_db: Database, server: tuple[str, ServerState], smollm2: HuggingFaceBackend
) -> None:
    local_spec = replace(SMOLLM2_SCORE, prompt_class=SELF_RATED)
    local, _ = _grade(sample_any_db, local_spec, PromptGrader(get_prompt_class(SELF_RATED), smollm2, "score"))
    before = _grades(sample_any_db)
    remote, _ = _grade(sample_any_db, _openai(server))
    after = _grades(sample_any_db)
    assert remote != local and after[local] == before[local] and len(after[remote]) == len(before[local])
    rows = {g.id: g for g in _graders(sample_any_db)}
    assert rows[local].model == rows[remote].model == "smollm2:score"  # one name, two graders
    assert (rows[local].identity["backend"], rows[remote].identity["backend"]) == ("hf", "openai")
    refs = {g.id: GraderRef.of(g).settings for g in rows.values()}
    assert refs[local].startswith("hf score") and refs[remote].startswith("openai chat score @ ")
    assert len(set(_labels(sample_any_db))) == 2


def test_the_same_settings_find_the_same_row_and_make_no_model_call(
    sample_any_db: Database, server: tuple[str, ServerState]
) -> None:
    spec = _openai(server, seed=7)
    first, _ = _grade(sample_any_db, spec)
    # timeout, retries and concurrency change how patiently it runs, never what it answers
    again, calls = _grade(sample_any_db, replace(spec, timeout=30.0, max_retries=2, concurrency=1))
    assert (again, calls) == (first, 0) and len(_graders(sample_any_db)) == 1


def test_jobs_record_their_grader_and_regrades_reuse_its_spec(sample_any_db: Database) -> None:
    question, calls = _run(sample_any_db, GraderSpec())
    direct, _ = _run(sample_any_db, GraderSpec(prompt_class="DirectSimilarity"))
    again, again_calls = _run(sample_any_db, GraderSpec(timeout=30.0, max_retries=0))
    assert question != direct and (again, again_calls) == (question, 0) and calls > 0
    with sample_any_db.session() as session:  # found by the id each job recorded: no method is built
        collection = get_collection(session, "sample")
        set_primary_grader(session, collection, direct)
        assert collection_grader(session, collection).prompt_class == "DirectSimilarity"
        set_primary_grader(session, collection, question)
        assert collection_grader(session, collection) == GraderSpec(timeout=30.0, max_retries=0)


def test_the_seed_is_part_of_the_identity(sample_any_db: Database, server: tuple[str, ServerState]) -> None:
    with sample_any_db.session() as session:
        seven = ensure_method_grader(session, build_method(_openai(server, seed=7)))
        eight = ensure_method_grader(session, build_method(_openai(server, seed=8)))
        unseeded = ensure_method_grader(session, build_method(_openai(server)))
        assert ensure_method_grader(session, build_method(_openai(server, seed=7, max_retries=0))) == seven
        identities = {g.id: (g.identity["seed"], GraderRef.of(g).settings) for g in session.scalars(select(Grader))}
        session.commit()
    assert len({seven, eight, unseeded}) == 3
    assert identities[seven][0] == 7 and "seed 7" in identities[seven][1] and identities[unseeded][0] is None


def _graded_file(tmp_path: Path, name: str, llm_options: dict[str, Any]) -> Path:
    paragraph = {
        "paragraph_id": "p1",
        "text": "The Eiffel Tower was completed in 1889.",
        "paragraph_data": {"judgments": [], "rankings": [RANKING]},
        "exam_grades": [
            {
                "correctAnswered": ["q1/a"],
                "wrongAnswered": [],
                "answers": [["q1/a", "4"]],
                "llm": "some-llm",
                "llm_options": llm_options,
                "exam_ratio": 1.0,
                "prompt_info": {"prompt_class": SELF_RATED},
                "self_ratings": [{"question_id": "q1/a", "self_rating": 4}],
            }
        ],
    }
    return write_jsonl(tmp_path / name, [["q1", [paragraph]]])


def test_imported_graders_whose_options_differ_are_two_and_a_reimport_is_one(
    database: Database, tmp_path: Path
) -> None:
    cold = _graded_file(tmp_path, "cold.jsonl", {"temperature": 0.0})
    warm = _graded_file(tmp_path, "warm.jsonl", {"temperature": 0.7})
    with database.session() as session:
        collection = ensure_collection(session, "c")
        for path in (cold, warm, cold, warm):
            import_interchange(session, collection, path)
        session.commit()
        graders = list(session.scalars(select(Grader).order_by(Grader.id)))
        settings = [GraderRef.of(g).settings for g in graders]
    assert len(graders) == 2 and len(_grades(database)) == 2
    assert settings == ["imported, temperature=0.0", "imported, temperature=0.7"]
