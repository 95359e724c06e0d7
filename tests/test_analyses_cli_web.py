"""One analysis per view (issue 11): the CLI's JSON and the web's numbers are the same, on dl19-dev.

The leaderboard, agreement (κ tables, threshold sweep, per-item κ, overrides) and compare analyses
live in their domain packages; the CLI and the web only render them. Each test asks both
boundaries for the same request (grader by id, version, measure) and compares the answers, then
checks the page shows those numbers. A twin grader (same model and prompt class, another template,
other ratings) makes the compare non-trivial and grader names ambiguous.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from markupsafe import escape
from scipy.stats import kendalltau
from sqlalchemy import select

from app.accounts.service import create_user
from app.agreement.analysis import agreement_analysis
from app.agreement.service import build_agreement_tables
from app.collections.revision import next_revision
from app.collections.service import get_collection
from app.db import session_scope
from app.evaluation.agreement import Confusion
from app.leaderboards.service import load_evaluation_data
from app.models import Grade, GradeOverride, Grader
from app.rubrics.service import latest_version
from app.web.main import create_app
from tests.conftest import TEST_DATA, Database, PostgresServer, Seeded, build_seeded, restore_seeded
from tests.helpers import cli
from tests.web.conftest import PASSWORDS, login

OFFICIAL = TEST_DATA / "dl19_paper_official_ranks.json"


def twin_grader(db: Database, collection_name: str, template_hash: str = "f" * 64) -> tuple[int, int]:
    """(first grader, its twin): the twin has the first's model and prompt class, another template, and
    the opposite opinion (rating 5 − r) on every cell, written after it."""
    with db.session() as session:
        collection = get_collection(session, collection_name)
        first = session.scalars(select(Grader).order_by(Grader.id)).first()
        assert first is not None
        twin = Grader(
            model=first.model,
            prompt_class=first.prompt_class,
            template_hash=template_hash,
            prompt_type=first.prompt_type,
            is_self_rated=first.is_self_rated,
            options={},
        )
        session.add(twin)
        session.flush()
        revision = next_revision(session, collection.id)
        for grade in session.scalars(select(Grade).where(Grade.grader_pk == first.id).order_by(Grade.id)).all():
            session.add(
                Grade(
                    pool_entry_pk=grade.pool_entry_pk,
                    grader_pk=twin.id,
                    item_id=grade.item_id,
                    self_rating=None if grade.self_rating is None else 5 - grade.self_rating,
                    raw_answer=grade.raw_answer,
                    collection_id=collection.id,
                    revision=revision,
                )
            )
        session.commit()
        return first.id, twin.id


def _override_cells(db: Database, grader_id: int, n: int) -> None:
    """Judges override the first ``n`` rated cells of the grader: the opposite rating on every other one."""
    with db.session() as session:
        grades = session.scalars(
            select(Grade)
            .where(Grade.grader_pk == grader_id, Grade.self_rating.is_not(None))
            .order_by(Grade.id)
            .limit(n)
        ).all()[:n]
        for i, grade in enumerate(grades):
            rating = grade.self_rating if i % 2 else 5 - (grade.self_rating or 0)
            session.add(
                GradeOverride(pool_entry_pk=grade.pool_entry_pk, item_id=grade.item_id, rating=rating, judge="j")
            )
        session.commit()


@dataclass(frozen=True)
class BuiltDev:
    """This module's database, seeded once per backend: the seed to copy, and what the tests look up."""

    seeded: Seeded
    ids: dict[str, int]


def _seed_dev(db: Database) -> dict[str, int]:
    """On a copy of dl19-dev: its official ranks, a viewer, a twin of the imported grader and 6 overrides."""
    cli("import", "dl19", "--official", OFFICIAL)
    with session_scope() as session:
        create_user(session, "viewer", "viewer", PASSWORDS["viewer"])
    first, twin = twin_grader(db, "dl19")
    _override_cells(db, first, 6)
    with session_scope() as session:
        version = latest_version(session, get_collection(session, "dl19"))
        assert version is not None
        return {"first": first, "twin": twin, "version": version.number}


def _built_dev(backend: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> BuiltDev:
    """The session's dl19-dev import (tests/conftest.py: ``seeded_dev_*``) plus ``_seed_dev``'s additions."""
    dev_seed: Seeded = request.getfixturevalue(f"seeded_dev_{backend}")
    postgres_server: PostgresServer | None = request.getfixturevalue("postgres_server")
    ids: dict[str, int] = {}

    def seed(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
        restore_seeded(db, dev_seed, postgres_server)
        ids.update(_seed_dev(db))

    seeded = build_seeded(
        backend,
        seed,
        tmp_path_factory.mktemp(f"analyses-{backend}"),
        request.getfixturevalue("sqlite_template"),
        postgres_server,
        request.getfixturevalue("postgres_template"),
    )
    return BuiltDev(seeded, ids)


@pytest.fixture(scope="module")
def built_dev_sqlite(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> BuiltDev:
    return _built_dev("sqlite", request, tmp_path_factory)


@pytest.fixture(scope="module")
def built_dev_postgresql(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> BuiltDev:
    return _built_dev("postgresql", request, tmp_path_factory)


@pytest.fixture
def dev(database: Database, request: pytest.FixtureRequest, postgres_server: PostgresServer | None) -> dict[str, int]:
    """``database`` holding a private copy of the module's seed: what one test writes, no other test sees."""
    built: BuiltDev = request.getfixturevalue(f"built_dev_{database.backend}")
    restore_seeded(database, built.seeded, postgres_server)
    return dict(built.ids)


@pytest.fixture
def web(dev: dict[str, int]) -> Iterator[TestClient]:
    with TestClient(create_app()) as client:
        login(client, "viewer")
        yield client


def _web_json(client: TestClient, url: str, **params: Any) -> Any:
    response = client.get(url, params=params)
    assert response.status_code == 200, response.text[:500]
    return response.json()


def _cli_json(*args: Any) -> Any:
    return json.loads(cli(*(str(a) for a in args), "--format", "json"))


# -- leaderboard -------------------------------------------------------------------------------


@pytest.mark.parametrize("measure", ["P@20", "cover", "NDCG@10"])
def test_leaderboard_cli_equals_web(dev: dict[str, int], web: TestClient, measure: str) -> None:
    grader, version = dev["first"], dev["version"]
    trec = measure != "cover"
    per_query = ("--per-query-correlation", "--min-judgment", 2) if trec else ()
    args = ("--min-rating", 4, "--grader", grader, "--rubric-version", version, "--bootstrap", 1000, "--seed", 42)
    from_cli = _cli_json("leaderboard", "dl19", "--measure", measure, *args, *per_query)
    params = {"measure": measure, "min_rating": 4, "grader": grader, "version": version, "min_judgment": 2}
    from_web = _web_json(web, "/c/dl19/leaderboard.json", **params)
    assert from_cli == from_web
    assert from_cli["grader_id"] == grader and from_cli["correlation"]["n_systems"] == 33
    assert ("per_query_correlation" in from_cli) is trec
    ranks = from_cli["predicted_ranks"]  # average ranks: ties share their mean, the sum is 1 + … + 37
    assert len(ranks) == 37 and sum(ranks.values()) == 37 * 38 / 2
    page = web.get("/c/dl19/leaderboard", params=params).text
    for system in from_cli["systems"]:
        row = page.split(f'<tr data-system="{system["system"]}">', 1)[1].split("</tr>", 1)[0]
        assert f'<td class="score">{system["score"]:.3f}</td>' in row


def test_measure_names_are_canonical_on_both_sides(dev: dict[str, int], web: TestClient) -> None:
    cli_board = _cli_json("leaderboard", "dl19", "--measure", "p.20", "--bootstrap", 0)
    web_board = _web_json(web, "/c/dl19/leaderboard.json", measure="P_20")
    assert cli_board["measure"] == web_board["measure"] == "P@20"
    assert "unknown measure" in cli("leaderboard", "dl19", "--measure", "bogus", expect=2)
    response = web.get("/c/dl19/leaderboard", params={"measure": "bogus"})
    assert response.status_code == 400 and "unknown measure" in response.text


# -- agreement ---------------------------------------------------------------------------------


def test_agreement_cli_equals_web(dev: dict[str, int], web: TestClient) -> None:
    grader = dev["first"]
    from_cli = _cli_json("agreement", "dl19", "--sweep", "--min-answers", 2, "--min-judgment", 2, "--grader", grader)
    from_web = _web_json(web, "/c/dl19/agreement.json", min_answers=2, min_judgment=2, grader=grader)
    assert from_cli == from_web
    assert [t["table"] for t in from_cli["tables"]] == ["GRADED", "MERGE", "LENIENT", "STRICT"]
    assert [s["tau"] for s in from_cli["sweep"]] == [1, 2, 3, 4, 5]
    assert all(s["kendall"] is not None for s in from_cli["sweep"])
    assert len(from_cli["per_item"]) > 50
    kappas = [r["kappa"] for r in from_cli["per_item"]]
    assert kappas == sorted(kappas)
    assert from_cli["overrides"]["n"] == 6 and from_cli["overrides"]["exact"] == 0.5
    page = web.get("/c/dl19/agreement", params={"min_answers": 2, "min_judgment": 2, "grader": grader}).text
    sweep = page.split('data-testid="sweep"', 1)[1].split("</table>", 1)[0]
    shown = re.findall(r"<tr><td>(\d)</td><td>([-0-9.]+)</td><td>([-0-9.]+)</td></tr>", sweep)
    assert shown == [(str(s["tau"]), f"{s['kappa']:.3f}", f"{s['kendall']:.3f}") for s in from_cli["sweep"]]
    items = page.split('data-testid="per-item"', 1)[1].split("</table>", 1)[0]
    worst = from_cli["per_item"][0]  # named by its question, the item id only in data attributes
    assert items.count("<tr data-item=") == 50 and f'<tr data-item="{worst["item_id"]}">' in items
    assert worst["item_text"] and f'title="{escape(worst["item_text"])}"' in items
    assert f"{from_cli['overrides']['n']} overridden cells" in page
    # the plain CLI contract (no --sweep) is still the list of tables
    assert (
        _cli_json("agreement", "dl19", "--min-answers", 2, "--min-judgment", 2, "--grader", grader)
        == (from_cli["tables"])
    )


def _reference(graded: Any, judgments: Any, min_judgment: int) -> tuple[list[Confusion], dict[Any, Confusion]]:
    """The sweep's and the per-item confusions from the per-passage dicts, pair by pair (the old page code)."""

    def confusion(pairs: list[tuple[bool, bool]]) -> Confusion:
        tp = sum(p and r for p, r in pairs)
        fp = sum(p and not r for p, r in pairs)
        fn = sum(r and not p for p, r in pairs)
        return Confusion(tp, fp, fn, len(pairs) - tp - fp - fn)

    judged = [(q, p, max(js)) for q, docs in judgments.items() for p, js in docs.items() if js]
    sweep = [
        confusion(
            [
                (max(graded[q][p].ratings.values(), default=0) >= tau, rel >= min_judgment)
                for q, p, rel in judged
                if p in graded.get(q, {})
            ]
        )
        for tau in range(1, 6)
    ]
    items = {}
    for q, docs in graded.items():
        for item in {i for grade in docs.values() for i in grade.ratings}:
            pairs = [
                (docs[p].ratings.get(item, 0) >= 4, max(js) >= min_judgment)
                for p, js in judgments.get(q, {}).items()
                if p in docs and js
            ]
            items[(q, item)] = confusion(pairs)
    return sweep, items


def test_array_agreement_equals_the_per_passage_reference(dev: dict[str, int]) -> None:
    from app.collections import queries

    with session_scope() as session:
        collection = get_collection(session, "dl19")
        for grader in (dev["first"], dev["twin"]):
            result = agreement_analysis(session, collection, grader_id=grader, min_answers=(1, 2, 5), min_judgment=2)
            data = load_evaluation_data(session, collection, grader_id=grader)
            judgments = queries.load_judgments(session, data.pool)
            tables = build_agreement_tables(data.graded, judgments, True, [1, 2, 5], 2)  # from the dicts
            assert list(result.tables) == tables
            sweep, items = _reference(data.graded, judgments, 2)
            assert [s.confusion for s in result.sweep] == sweep
            bank = queries.load_bank(session, latest_version(session, collection))
            in_rubric = {(q, e.item_id) for q, entries in bank.items() for e in entries}  # per item: the rubric's
            assert {(r.query_id, r.item_id): r.confusion for r in result.per_item} == {
                key: confusion for key, confusion in items.items() if key in in_rubric
            }


# -- compare -----------------------------------------------------------------------------------


def test_compare_cli_equals_web(dev: dict[str, int], web: TestClient) -> None:
    first, twin = dev["first"], dev["twin"]
    from_cli = _cli_json("compare", "dl19", "--a-grader", first, "--b-grader", twin, "--measure", "cover")
    from_web = _web_json(web, "/c/dl19/compare.json", a_grader=first, b_grader=twin, measure="cover")
    assert from_cli == from_web
    assert from_cli["a"]["grader_id"] == first and from_cli["b"]["grader_id"] == twin
    assert from_cli["a"]["rubric_version"] == dev["version"]  # both default to the newest version
    systems = from_cli["systems"]
    assert len(systems) == 37
    expected = kendalltau([s["a"] for s in systems], [s["b"] for s in systems]).statistic
    assert from_cli["kendall"] == pytest.approx(expected, abs=1e-12)
    page = web.get("/c/dl19/compare", params={"a_grader": first, "b_grader": twin, "measure": "cover"}).text
    assert f'data-testid="tau">{from_cli["kendall"]:.3f}<' in page
    assert 'data-testid="coverage-a"' in page and f'data-grader="{twin}"' in page
    same = _cli_json("compare", "dl19", "--grader", first, "--measure", "P@20")
    assert same["kendall"] == pytest.approx(1.0) and all(s["moved"] == 0 for s in same["systems"])


# -- ambiguous graders ---------------------------------------------------------------------------


def test_model_alone_is_ambiguous_on_the_cli(dev: dict[str, int]) -> None:
    with session_scope() as session:
        model = session.get_one(Grader, dev["first"]).model
    for args in (
        ("leaderboard", "dl19", "--measure", "cover"),
        ("agreement", "dl19"),
        ("compare", "dl19"),
        ("export", "qrels", "dl19", "--out", "/dev/null"),
    ):
        message = cli(*args, "--model", model, expect=2)
        assert message.startswith("error:") and "2 graders match" in message, message
        assert f"#{dev['first']} " in message and f"#{dev['twin']} " in message
    board = _cli_json("leaderboard", "dl19", "--measure", "cover", "--grader", dev["twin"], "--bootstrap", 0)
    assert board["grader_id"] == dev["twin"]
    assert "no grader 999999" in cli("leaderboard", "dl19", "--measure", "cover", "--grader", 999999, expect=2)
