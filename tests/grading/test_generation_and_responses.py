"""Test-bank drafting (Phase 1), generated-response import, and the grade/generate CLI."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.collections.responses import segment, token_count
from app.collections.service import get_collection
from app.grading import templates
from app.grading.backends.base import BackendError
from app.grading.backends.hf import HuggingFaceBackend
from app.grading.prompts import PromptMessages
from app.models import BankItem, Grade, Passage, RankingEntry, RubricVersion
from app.rubrics.generation import (
    GenerationParseError,
    accept_draft,
    draft_bank,
    generation_prompt,
    parse_generated_items,
)
from app.rubrics.service import latest_version
from tests.conftest import Database
from tests.helpers import cli, write_jsonl


def test_generation_prompts_are_the_published_ones() -> None:
    prompt = generation_prompt("questions", "dl", "why does bread rise")
    assert (
        prompt
        == templates.DL_QUESTION_GENERATION.replace("{query_text}", "why does bread rise")
        + templates.QUESTION_JSON_INSTRUCTION
    )
    car = generation_prompt("nuggets", "car", "Bread", "Leavening")
    assert car.startswith("Explore the connection between 'Bread' with a specific focus on the subtopic 'Leavening'.")
    assert car.endswith(templates.NUGGET_JSON_INSTRUCTION)
    assert "Generate 5 concise" in generation_prompt("questions", "dl", "q", n=5)


@pytest.mark.parametrize(
    "answer",
    [
        '```json\n{ "questions": ["What is yeast?", "Why knead?"] }\n```',
        'Sure! Here they are: {"questions": ["What is yeast?", "Why knead?"]} Hope this helps.',
        "['What is yeast?', 'Why knead?']",
        '```python\n["What is yeast?", "Why knead?"]\n```',
        "Questions:\n1. What is yeast?\n2) Why knead?\n",
    ],
)
def test_generated_items_are_parsed_robustly(answer: str) -> None:
    assert parse_generated_items(answer, "questions") == ["What is yeast?", "Why knead?"]


def test_unparsable_generation_is_an_error() -> None:
    with pytest.raises(GenerationParseError):
        parse_generated_items("I cannot help with that.", "questions")


class ScriptedGenerator:
    """Unit-test stand-in for an LLM above the backend layer: answers in order."""

    def __init__(self, answers: list[str | BackendError]) -> None:
        self.answers = answers
        self.prompts: list[str] = []

    def generate(self, prompts: Sequence[PromptMessages]) -> list[str | BackendError]:
        self.prompts += [p.text for p in prompts]
        return self.answers[: len(prompts)]


def test_draft_then_accept_some_items(sample_db: Database) -> None:
    generator = ScriptedGenerator(
        [
            '{"questions": ["What do bees eat?", "What is the waggle dance?"]}',
            BackendError("RateLimitError after 7 attempts"),
            "no list here",
        ]
    )
    with sample_db.session() as session:
        collection = get_collection(session, "sample")
        published_before = latest_version(session, collection)
        report = draft_bank(session, collection, generator, kind="questions")
        session.commit()
        assert report.items == 2 and set(report.failures) == {"bread", "aurora"}
        draft = session.scalar(select(RubricVersion).where(RubricVersion.status == "draft"))
        assert draft is not None and latest_version(session, collection) == published_before  # drafts are not used
        new_id = session.scalar(select(BankItem.item_id).where(BankItem.text == "What do bees eat?"))
        assert new_id is not None and new_id.startswith("bees/")
        published = accept_draft(session, collection, draft, [new_id], "judge1")
        session.commit()
        assert published.created_by == "judge1" and latest_version(session, collection) == published
        texts = session.scalars(select(BankItem.text).where(BankItem.query_pk == BankItem.query_pk)).all()
        assert "What do bees eat?" in texts
    assert "how do honeybees tell each other where flowers are" in generator.prompts[0]


def test_drafting_with_the_shipped_llm_runs_end_to_end(sample_db: Database, smollm2: HuggingFaceBackend) -> None:
    generator = HuggingFaceBackend("smollm2", dtype="float32", max_new_tokens=48)
    generator._model, generator._tokenizer = smollm2._model, smollm2._tokenizer
    with sample_db.session() as session:
        report = draft_bank(session, get_collection(session, "sample"), generator, kind="questions", query_ids=["bees"])
        session.commit()
    # A 135M model may or may not produce a parsable list; either way the outcome is recorded per query.
    assert (report.items > 0 and report.version_number is not None) or "bees" in report.failures


def test_segmentation_packs_sentences_under_the_budget() -> None:
    text = " ".join(f"Sentence number {i} says something useful about the topic." for i in range(200))
    segments = segment(text, 400)
    assert len(segments) > 1 and all(token_count(s) <= 400 for s in segments)
    assert " ".join(segments) == text
    giant = "word " * 1000
    assert all(token_count(s) <= 400 for s in segment(giant, 400))


def test_rag24_responses_import_as_ranked_segments(sample_db: Database, tmp_path: Path) -> None:
    long_answer = [{"text": f"Yeast makes carbon dioxide, fact {i}.", "citations": [0]} for i in range(150)]
    answers = write_jsonl(
        tmp_path / "answers.jsonl",
        [
            {"run_id": "rag-a", "topic_id": "bread", "answer": long_answer, "references": ["d1"]},
            {"run_id": "rag-a", "topic_id": "bees", "answer": [{"text": "Bees dance.", "citations": []}]},
        ],
    )
    cli("import", "sample", "--responses", answers)
    cli("import", "sample", "--responses", answers)  # idempotent
    with sample_db.session() as session:
        ids = session.scalars(
            select(Passage.passage_id).where(Passage.passage_id.like("rag-a:%")).order_by(Passage.id)
        ).all()
        assert ids[0] == "rag-a:bread:0" and "rag-a:bees:0" in ids and len(ids) >= 3
        assert session.scalar(select(func.count()).select_from(RankingEntry)) == 60 + len(ids)


def test_bad_responses_name_file_line_and_field(sample_db: Database, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"run_id": "x", "topic_id": "bees", "answer": [{"text": "ok"}]})
        + "\n"
        + json.dumps({"run_id": "x", "answer": []})
        + "\n"
    )
    message = cli("import", "sample", "--responses", bad, expect=2)
    assert "bad.jsonl" in message and "line 2" in message and "topic_id" in message
    with sample_db.session() as session:
        assert session.scalar(select(func.count()).select_from(Passage).where(Passage.passage_id.like("x:%"))) == 0


def test_grade_cli_writes_grades_the_leaderboard_reads(sample_db: Database) -> None:
    cli("grade", "sample")
    with sample_db.session() as session:
        assert session.scalar(select(func.count()).select_from(Grade)) == 24 * 3
    result = json.loads(cli("leaderboard", "sample", "--measure", "cover", "--min-rating", "4", "--format", "json"))
    scores = {s["system"]: s["score"] for s in result["systems"]}
    assert scores["strong-ranker"] > scores["weak-ranker"]
    assert result["correlation"]["n_systems"] == 4


def test_grade_cli_rerun_and_direct_prompts(sample_db: Database) -> None:
    from typer.testing import CliRunner

    from app.cli import app

    CliRunner().invoke(app, ["grade", "sample"])
    rerun = CliRunner().invoke(app, ["grade", "sample"])
    assert rerun.exit_code == 0 and "0 model prompts, 72 cached" in rerun.stderr.replace("\n", " ")
    direct = CliRunner().invoke(app, ["grade", "sample", "--prompt-class", "DirectSimilarity"])
    assert direct.exit_code == 0 and "graded 24 cells" in direct.stderr.replace("\n", " ")
    unknown = CliRunner().invoke(app, ["grade", "sample", "--backend", "hf", "--prompt-class", "Nope"])
    assert unknown.exit_code == 2 and "unknown prompt class" in unknown.stderr
