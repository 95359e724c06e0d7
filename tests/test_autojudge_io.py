"""TREC RAG / AutoJudge formats, judged by autojudge_base itself: its writers make our input, its
loaders read our output (tests/interop.py imports it offline)."""

from __future__ import annotations

from dataclasses import replace
from importlib.metadata import version
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from sqlalchemy import select

from app.collections.grades_io import canonical_hash
from app.collections.service import ensure_collection
from app.models import BankItem, Citation, ExternalJudgment, Judgment, Passage, Query, RubricVersion
from app.rubrics.editing import ItemChange, apply_edit
from app.rubrics.service import ItemSpec, create_version, latest_version, store_items, version_item_pks
from tests.conftest import REPO, Database
from tests.helpers import cli, write_jsonl


def _v3_banks(tmp_path: Path, autojudge: ModuleType) -> tuple[Path, Any]:
    """Two NuggetBanks v3 written by autojudge_base: questions with cited gold answers, AND sub-nuggets,
    a claim, importance and an LLM creator."""
    from autojudge_base.nugget_data import (
        AggregatorType,
        Creator,
        NuggetBank,
        NuggetBanks,
        NuggetClaim,
        NuggetQuestion,
        write_nugget_banks,
    )

    llm = Creator(is_human=False, llm_model="gpt-4o", creation_date="2025-06-01T00:00:00+00:00")
    when = NuggetQuestion.from_lazy("t1", "When was the tower built?", ["1889", "in 1889"], creator=llm)
    when.answers["1889"].add_references(["doc-7"])
    when.importance = "vital"
    who = NuggetQuestion.from_lazy("t1", "Who designed and built it?", creator=llm, importance="okay")
    who.sub_nuggets = [
        NuggetQuestion.from_lazy("t1", "Who designed it?", ["Koechlin"]),
        NuggetClaim.from_lazy("t1", "Eiffel's company built it"),
    ]
    who.aggregator_type = AggregatorType.AND
    claim = NuggetClaim.from_lazy("t1", "The tower is 330 m tall", references=["doc-9"], creator=llm)
    first = NuggetBank(query_id="t1", title_query="Eiffel tower history").add_nuggets([when, who, claim])
    second = NuggetBank(query_id="t2", title_query="Louvre").add_nuggets(
        [NuggetClaim.from_lazy("t2", "The Louvre is in Paris", importance=2)]
    )
    banks = NuggetBanks.from_banks_list([first, second])
    path = tmp_path / "nuggets.jsonl"
    write_nugget_banks(banks, path)
    return path, banks


def _comparable(bank: Any) -> dict[str, Any]:
    """What a round trip must keep of a bank: texts, ids, answers and their references, structure, importance."""

    def nugget(n: Any) -> dict[str, Any]:
        answers = {
            a: sorted(r.doc_id for r in (v.references or [])) for a, v in (getattr(n, "answers", None) or {}).items()
        }
        return {
            "text": getattr(n, "question", None) or n.claim,
            "answers": answers,
            "references": sorted(r.doc_id for r in n.references or []),
            "importance": n.importance,
            "aggregator": n.aggregator_type.value if n.sub_nuggets else None,
            "subs": [nugget(s) for s in n.sub_nuggets or []],
            "creator": [(c.is_human, c.llm_model) for c in n.creator or []],
        }

    return {
        "query": (bank.query_id, bank.title_query),
        "questions": [nugget(n) for n in (bank.nugget_bank or {}).values()],
        "claims": [nugget(n) for n in (bank.claim_bank or {}).values()],
    }


def test_nuggetbanks_v3_round_trip_through_autojudge_base(
    database: Database, autojudge: ModuleType, tmp_path: Path
) -> None:
    from autojudge_base.nugget_data import load_nugget_banks_from_file

    path, banks = _v3_banks(tmp_path, autojudge)
    cli("import", "rag", "--nuggets", path)
    with database.session() as session:
        items = {i.text: i for i in session.scalars(select(BankItem))}
    who = items["Who designed and built it?"]
    assert (who.kind, who.importance, who.structure["op"]) == ("question", "okay", "and")
    assert [c["kind"] for c in who.structure["children"]] == ["question", "nugget"]
    assert items["The tower is 330 m tall"].kind == "nugget"
    assert items["The Louvre is in Paris"].weight == 2.0 and items["The Louvre is in Paris"].importance is None
    assert items["When was the tower built?"].provenance["creator"][0]["llm_model"] == "gpt-4o"

    cli("import", "rag", "--nuggets", path)  # the same banks again: the same items, no new version
    out = tmp_path / "exported.jsonl"
    cli("export", "nuggets", "rag", "--version", "1", "--out", out)
    exported = load_nugget_banks_from_file(out)
    assert exported.format_version == "v3" and list(exported.banks) == ["t1", "t2"]
    assert _comparable(exported.banks["t1"]) == _comparable(banks.banks["t1"])
    louvre = exported.banks["t2"].claim_bank["The Louvre is in Paris"]
    assert louvre.metadata == {"weight": 2.0}
    with database.session() as session:
        assert len(session.scalars(select(RubricVersion)).all()) == 1
    formats = (REPO / "docs" / "formats.md").read_text(encoding="utf-8")  # it names the versions tested against
    assert all(f"{name}=={version(name)}" in formats for name in ("autojudge-base", "autojudge-evaluate"))


def test_autonuggetizer_list_and_creators_from_the_audit_trail(
    database: Database, autojudge: ModuleType, tmp_path: Path
) -> None:
    from autojudge_base.nugget_data import load_nugget_banks_from_file
    from autojudge_base.nugget_data.nuggetizer.nuggetizer_data import (
        NuggetizerNugget,
        NuggetizerNuggetBank,
        NuggetizerNuggetBanks,
        write_nuggetizer_banks,
    )

    listed = NuggetizerNuggetBank(
        qid="t1",
        query="Eiffel tower history",
        nuggets=[
            NuggetizerNugget(text="Built for the 1889 World's Fair", importance="vital"),
            NuggetizerNugget(text="Was once the tallest structure", importance="okay"),
            NuggetizerNugget(text="Unlabelled nugget", importance="failed"),
        ],
    )
    path = tmp_path / "autonuggetizer.jsonl"
    write_nuggetizer_banks(NuggetizerNuggetBanks.from_banks_list([listed]), path)
    cli("import", "rag", "--nuggets", path)
    with database.session() as session:
        collection = ensure_collection(session, "rag")
        items = {i.text: i for i in session.scalars(select(BankItem))}
        assert [items[t].importance for t in sorted(items)] == ["vital", None, "okay"]
        assert items["Unlabelled nugget"].provenance["importance"] == "failed"
        vital = items["Built for the 1889 World's Fair"]
        edit = ItemChange("edit", "t1", vital.item_id, "Built for the 1889 Exposition", expected_text=vital.text)
        apply_edit(session, collection, [edit], user="bob")  # an edit of the text keeps the importance
        assert session.scalars(select(BankItem.importance).where(BankItem.text.like("%Exposition"))).one() == "vital"
        # an LLM draft (accepted by alice) and an item alice added: the audit trail names their creators
        drafted = ItemSpec("t1", "t1/d", "nugget", "An LLM's nugget", None, None, {"drafted": True})
        added = ItemSpec("t1", "t1/a", "nugget", "Alice's nugget", None, None, {"added": True})
        from app.collections.service import CollectionWriter

        writer = CollectionWriter(session, collection)
        draft_pk, added_pk = store_items(session, collection, writer, [drafted, added])
        create_version(session, collection, [draft_pk], created_by="alice", note="draft", status="draft")
        base = version_item_pks(session, latest_version(session, collection))
        number = create_version(session, collection, [*base, draft_pk, added_pk], created_by="alice", note="e").number
        session.commit()
    out = tmp_path / "v.jsonl.gz"
    cli("export", "nuggets", "rag", "--version", str(number), "--out", out)
    claims = load_nugget_banks_from_file(out).banks["t1"].claim_bank
    assert claims["Built for the 1889 Exposition"].importance == "vital"
    assert [(c.is_human, c.assessor_id) for c in claims["Built for the 1889 Exposition"].creator] == [(True, "bob")]
    assert claims["Was once the tallest structure"].creator is None  # a plain import records no creator
    assert [(c.is_human, c.assessor_id) for c in claims["An LLM's nugget"].creator] == [(False, None)]
    assert [(c.is_human, c.assessor_id) for c in claims["Alice's nugget"].creator] == [(True, "alice")]


def _reports(tmp_path: Path, autojudge: ModuleType) -> tuple[Path, Path]:
    """Requests and reports written by autojudge_base: the three citation shapes, and a long answer."""
    from autojudge_base.report import (
        NeuclirReportSentence,
        Rag24ReportSentence,
        RagtimeReportSentence,
        Report,
        ReportMetaData,
    )
    from autojudge_base.request import Request

    requests = [Request(request_id="t1", title="Eiffel tower history", background="A tourist asks.", limit=400)]
    long_sentence = "The tower has " + " ".join(["many"] * 450) + " rivets."

    def meta(run: str) -> ReportMetaData:
        return ReportMetaData(team_id="team", run_id=run, topic_id="t1")

    reports = [
        Report(
            metadata=meta("ragtime"),
            responses=[
                RagtimeReportSentence(text="It was built in 1889.", citations={"doc-1": 0.2, "doc-2": 0.9}),
                RagtimeReportSentence(text=long_sentence, citations={"doc-3": 1.0}),
                RagtimeReportSentence(text="It is in Paris.", citations=None),
            ],
        ),
        Report(
            metadata=meta("neuclir"), responses=[NeuclirReportSentence(text="Built 1889.", citations=["d-a", "d-b"])]
        ),
        Report(
            metadata=meta("rag24"),
            answer=[Rag24ReportSentence(text="Gustave Eiffel built it.", citations=[1])],
            references=["doc-x", "doc-y"],
        ),
    ]
    request_path = write_jsonl(tmp_path / "requests.jsonl", [r.model_dump(exclude_none=True) for r in requests])
    report_path = tmp_path / "reports.jsonl"
    report_path.write_text("".join(r.model_dump_json(exclude_none=True) + "\n" for r in reports), encoding="utf-8")
    return request_path, report_path


def test_requests_reports_with_citations_and_another_judges_qrels(
    database: Database, autojudge: ModuleType, tmp_path: Path
) -> None:
    requests, reports = _reports(tmp_path, autojudge)
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("t1 0 doc-1 1\n", encoding="utf-8")
    umbrela = tmp_path / "umbrela.txt"
    umbrela.write_text("t1 0 doc-1 3\nt1 0 neuclir:t1:0 2\n", encoding="utf-8")
    args = ["--requests", requests, "--reports", reports, "--qrels", qrels, "--judgments-from", f"umbrela={umbrela}"]
    cli("import", "rag", *args)
    cli("import", "rag", *args)  # idempotent: the same rows, citations replaced, not doubled
    with database.session() as session:
        query = session.scalars(select(Query)).one()
        assert (query.text, query.info) == ("Eiffel tower history", {"background": "A tourist asks.", "limit": 400})
        cited = session.execute(
            select(Passage.passage_id, Citation.doc_id, Citation.sentence, Citation.confidence)
            .join(Passage, Passage.id == Citation.passage_pk)
            .order_by(Passage.passage_id, Citation.position)
        ).all()
        assert [tuple(c) for c in cited] == [
            ("neuclir:t1:0", "d-a", 0, None),
            ("neuclir:t1:0", "d-b", 0, None),
            ("rag24:t1:0", "doc-y", 0, None),
            ("ragtime:t1:0", "doc-2", 0, 0.9),  # by descending confidence
            ("ragtime:t1:0", "doc-1", 0, 0.2),
            ("ragtime:t1:1", "doc-3", 1, 1.0),  # a sentence longer than a passage: each piece cites
            ("ragtime:t1:2", "doc-3", 1, 1.0),
        ]
        assert (
            session.scalars(select(Passage.text).where(Passage.passage_id == "ragtime:t1:2"))
            .one()
            .endswith("It is in Paris.")
        )
        external = session.execute(select(ExternalJudgment.source, ExternalJudgment.relevance)).all()
        assert sorted(tuple(e) for e in external) == [("umbrela", 2), ("umbrela", 3)]
        assert session.scalars(select(Judgment.relevance)).all() == [1]  # the manual truth is untouched


def test_hostile_interop_input_is_refused_with_file_line_and_field(database: Database, tmp_path: Path) -> None:
    bank = write_jsonl(tmp_path / "bad.jsonl", [{"query_id": "t1", "nugget_bank": [{"question": 7}]}])
    assert "bad.jsonl, line 1, field 'nugget_bank" in cli("import", "rag", "--nuggets", bank, expect=2)
    weight = write_jsonl(
        tmp_path / "w.jsonl", [{"qid": "t1", "query": "q", "nuggets": [{"text": "n", "importance": "1e9"}]}]
    )
    assert "field 'nuggets[0].importance'" in cli("import", "rag", "--nuggets", weight, expect=2)
    other = write_jsonl(tmp_path / "other.jsonl", [{"hello": 1}])
    assert "not a nugget bank" in cli("import", "rag", "--nuggets", other, expect=2)
    report = {
        "metadata": {"run_id": "r", "topic_id": "t1"},
        "answer": [{"text": "x", "citations": [3]}],
        "references": [],
    }
    reports = write_jsonl(tmp_path / "r.jsonl", [report])
    cli("import", "rag", "--requests", write_jsonl(tmp_path / "q.jsonl", [{"request_id": "t1", "title": "T"}]))
    assert "field 'answer[0].citations'" in cli("import", "rag", "--reports", reports, expect=2)
    assert "NAME=FILE" in cli("import", "rag", "--judgments-from", "no-name", expect=2)
    assert "judge's name" in cli("import", "rag", "--judgments-from", f"{'j' * 201}={reports}", expect=2)
    assert "no rubric version 9" in cli("export", "nuggets", "rag", "--version", "9", "--out", tmp_path / "o", expect=2)
    with database.session() as session:
        assert session.scalars(select(BankItem)).all() == []
    spaced = write_jsonl(tmp_path / "s.jsonl", [report | {"metadata": {"run_id": "r x", "topic_id": "t1"}}])
    assert "field 'metadata.run_id'" in cli("import", "rag", "--reports", spaced, expect=2)
    # a run id that is a path: stored as a name, never followed when it becomes a file name
    escape = report | {"metadata": {"run_id": "../escape", "topic_id": "t1"}, "answer": [{"text": "x"}]}
    cli("import", "rag", "--reports", write_jsonl(tmp_path / "e.jsonl", [escape]))
    assert "cannot name a run file" in cli("export", "runs", "rag", "--out", tmp_path / "out" / "runs", expect=2)
    assert not (tmp_path / "out").exists()
    nuggets = write_jsonl(tmp_path / "n.jsonl", [{"qid": "t1", "query": "q", "nuggets": [{"text": "n"}]}])
    cli("import", "rag", "--nuggets", nuggets)
    assert "cannot write" in cli("export", "nuggets", "rag", "--version", "1", "--out", tmp_path, expect=2)


def test_the_rag_sample_is_valid_autojudge_data_and_imports(
    database: Database, autojudge: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the similarity model is local, as in `rubric demo`
    from autojudge_base.nugget_data import load_nugget_banks_from_file
    from autojudge_base.nugget_data.nuggetizer.nuggetizer_data import load_nuggetizer_banks_from_file
    from autojudge_base.report import load_report
    from autojudge_base.request import load_requests_from_file

    from app.samples.rag import ANSWERS, OFFICIAL, RAG_NAME, write_rag_sample

    files = write_rag_sample(tmp_path / "rag")
    assert len(load_report(files.reports)) == len(ANSWERS) * 3 and len(load_requests_from_file(files.requests)) == 3
    assert len(load_nuggetizer_banks_from_file(files.nuggets).banks) == 3
    cli(
        "import",
        RAG_NAME,
        "--requests",
        files.requests,
        "--nuggets",
        files.nuggets,
        "--reports",
        files.reports,
        "--judgments-from",
        f"umbrela={files.umbrela}",
        "--official",
        files.official,
    )
    out = tmp_path / "banks.jsonl"
    cli("export", "nuggets", RAG_NAME, "--version", "1", "--out", out)
    banks = load_nugget_banks_from_file(out).banks
    assert {n.importance for b in banks.values() for n in b.claim_bank.values()} == {"vital", "okay"}
    # offline, as `rubric demo` grades it: the similarity grader grades the nuggets, and the vital score ranks
    cli("grade", RAG_NAME, "--backend", "similarity", "--prompt-class", "NuggetSimilarity")
    board = cli("leaderboard", RAG_NAME, "--measure", "nugget-vital", "--format", "tsv")
    ranked = [line.split("\t")[0] for line in board.splitlines() if line.startswith("rag-")]
    assert ranked == list(OFFICIAL)
    with database.session() as session:
        assert len(session.scalars(select(Citation)).all()) == sum(
            len(c) for a in ANSWERS.values() for q in a.values() for _, c in q
        )


def test_content_hash_covers_importance_weight_and_structure_only_when_set() -> None:
    base = ItemSpec("q", "q/1", "nugget", "A fact", None, None, None)
    assert base.content_hash() == canonical_hash(["q", "q/1", "nugget", "A fact", None, None, None])  # as before 0009
    changed = [replace(base, importance="vital"), replace(base, weight=0.5), replace(base, structure={"op": "and"})]
    assert len({base.content_hash(), *(c.content_hash() for c in changed)}) == 4
    assert replace(base, provenance={"format": "x"}).content_hash() == base.content_hash()  # provenance is no content
