"""The grader policy (issue 11): ambiguous graders, the primary grader, the picker, the grid, exports."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.collections.export import write_interchange
from app.collections.graders import grader_coverage, primary_grader
from app.collections.importing import ImportFiles, import_files
from app.collections.revision import next_revision
from app.collections.service import get_collection
from app.grading.service import GraderSpec
from app.jobs.launch import collection_grader
from app.models import Grade, Grader, Job, PoolEntry, Query
from app.web.main import create_app
from tests.conftest import Database
from tests.web.conftest import login

Q = "bees"
VIEWS = ("bad", "uncovered", "verify", "impact")


@pytest.fixture
def graded(web_db_any: Database) -> Database:
    """The sample collection graded by the default grader, on SQLite and PostgreSQL, with one user per role."""
    return web_db_any


@pytest.fixture
def client(graded: Database) -> Iterator[TestClient]:
    with TestClient(create_app()) as test_client:
        yield test_client


def _twin(db: Database, template_hash: str, *, every: int = 1) -> int:
    """A grader with the default grader's model and prompt class but another template: ambiguous by name.

    It copies every ``every``-th grade of the first grader (every=1: complete; more: partial), written
    after it (newer grade ids, as a later job would).
    """
    with db.session() as session:
        collection = get_collection(session, "sample")
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
        grades = session.scalars(select(Grade).where(Grade.grader_pk == first.id).order_by(Grade.id)).all()
        for grade in grades[::every]:
            session.add(
                Grade(
                    pool_entry_pk=grade.pool_entry_pk,
                    grader_pk=twin.id,
                    item_id=grade.item_id,
                    self_rating=5 - (grade.self_rating or 0),  # a different opinion, visible on the pages
                    raw_answer=grade.raw_answer,
                    collection_id=collection.id,
                    revision=revision,
                )
            )
        session.commit()
        return twin.id


def _first_grader(db: Database) -> int:
    with db.session() as session:
        pk = session.scalar(select(Grader.id).order_by(Grader.id).limit(1))
        assert pk is not None
        return pk


def _pages(grader: int | None) -> list[str]:
    suffix = "" if grader is None else f"?grader={grader}"
    return [
        f"/c/sample/leaderboard{suffix}",
        f"/c/sample/leaderboard.json{suffix}",
        f"/c/sample/leaderboard.tsv{suffix}",
        f"/c/sample/qrels{suffix}",
        f"/c/sample/agreement{suffix}",
        *(f"/c/sample/oversight/{view}{suffix}" for view in VIEWS),
        f"/c/sample/grid/{Q}{suffix}",
    ]


def _shown_grader(html: str) -> int:
    """The grader a page says it shows (its coverage line)."""
    match = re.search(r'data-testid="grader-coverage" data-grader="(\d+)"', html)
    assert match, "page shows no grader coverage"
    return int(match.group(1))


def test_ambiguous_graders_answer_every_page_for_each_grader(client: TestClient, graded: Database) -> None:
    first = _first_grader(graded)
    twin = _twin(graded, "f" * 64)
    login(client, "viewer")
    for grader in (None, first, twin):
        for url in _pages(grader):
            response = client.get(url)
            assert response.status_code == 200, f"{url}: {response.status_code} {response.text[:300]}"
    compare = client.get("/c/sample/compare", params={"a_grader": first, "b_grader": twin})
    assert compare.status_code == 200
    assert client.get("/c/sample/leaderboard?grader=999999").status_code == 404
    assert client.get(f"/c/sample/grid/{Q}?grader=999999").status_code == 404


def test_a_partial_later_grader_does_not_become_the_default(client: TestClient, graded: Database) -> None:
    first = _first_grader(graded)
    partial = _twin(graded, "e" * 64, every=7)  # the newest grades, about 1/7 of the cells
    with graded.session() as session:
        collection = get_collection(session, "sample")
        coverage = {c.grader.id: c for c in grader_coverage(session, collection)}
        assert coverage[first].complete and coverage[first].cells_graded == coverage[first].cells_total
        assert not coverage[partial].complete and 0 < coverage[partial].cells_graded < coverage[first].cells_graded
        assert coverage[partial].queries_total == coverage[first].queries_total
        primary = primary_grader(session, collection)
        assert primary is not None and primary.id == first
        # a cancelled job of another grader is the newest job: rubric-edit regrades keep the primary's spec
        session.add(
            Job(
                collection_id=collection.id,
                kind="grade",
                state="cancelled",
                params={"grader": GraderSpec(prompt_class="DirectSimilarity").as_dict()},
                total=100,
                done=1,
            )
        )
        session.commit()
        assert collection_grader(session, collection) == GraderSpec()
    login(client, "viewer")
    for url in _pages(None):
        if not url.split("?")[0].endswith((".json", ".tsv", "qrels")):
            assert _shown_grader(client.get(url).text) == first, url
    picked = client.get(f"/c/sample/leaderboard?grader={partial}").text
    assert _shown_grader(picked) == partial and 'data-testid="partial-grader"' in picked
    assert 'data-testid="partial-grader"' not in client.get("/c/sample/leaderboard").text
    overview = client.get("/c/sample").text
    assert "(primary)" in overview and "partial" in overview


def test_an_organizer_sets_the_primary_grader_and_every_page_defaults_to_it(
    client: TestClient, graded: Database
) -> None:
    first = _first_grader(graded)
    partial = _twin(graded, "d" * 64, every=3)
    token = login(client, "organizer")
    assert (
        client.post("/c/sample/primary-grader", data={"grader": "999999"}, headers={"X-CSRF-Token": token}).status_code
        == 404
    )
    response = client.post(
        "/c/sample/primary-grader",
        data={"grader": str(partial)},
        headers={"X-CSRF-Token": token},
        follow_redirects=False,
    )
    assert response.status_code == 303
    for url in _pages(None):
        if not url.split("?")[0].endswith((".json", ".tsv", "qrels")):
            assert _shown_grader(client.get(url).text) == partial, url
    assert client.get("/c/sample/leaderboard.json").headers["X-Grader-Id"] == str(partial)
    assert "make primary" in client.get("/c/sample").text
    client.post("/c/sample/primary-grader", data={"grader": "0"}, headers={"X-CSRF-Token": token})
    assert _shown_grader(client.get("/c/sample/leaderboard").text) == first


def test_the_grid_shows_imported_grades_of_a_picked_grader(
    client: TestClient, graded: Database, tmp_path: Path
) -> None:
    """Grades imported from an interchange file under another LLM name can be reviewed on the grid."""
    with graded.session() as session:
        collection = get_collection(session, "sample")
        exported = tmp_path / "export.jsonl"
        write_interchange(session, collection, exported)
    renamed = tmp_path / "flan.jsonl"
    text = exported.read_text()
    model = json.dumps(_model(graded))
    assert model in text
    renamed.write_text(text.replace(f'"llm": {model}', '"llm": "google/flan-t5-large"'))
    with graded.session() as session:
        import_files(session, get_collection(session, "sample"), ImportFiles(passages=[renamed]))
        session.commit()
        flan = session.scalar(select(Grader.id).where(Grader.model == "google/flan-t5-large"))
        assert flan is not None
        expected = session.scalar(
            select(Grade.self_rating)
            .join(PoolEntry, PoolEntry.id == Grade.pool_entry_pk)
            .join(Query, Query.id == PoolEntry.query_pk)
            .where(Grade.grader_pk == flan, Query.query_id == Q, Grade.self_rating.is_not(None))
            .limit(1)
        )
    login(client, "viewer")
    page = client.get(f"/c/sample/grid/{Q}", params={"grader": flan}).text
    assert _shown_grader(page) == flan and "google/flan-t5-large" in page
    assert re.search(rf'class="cell g{expected}"', page)
    assert f'option value="{flan}" selected' in page


def _model(db: Database) -> str:
    with db.session() as session:
        model = session.scalar(select(Grader.model).order_by(Grader.id).limit(1))
        assert model is not None
        return model


def test_exports_carry_the_grader_used(client: TestClient, graded: Database) -> None:
    first = _first_grader(graded)
    twin = _twin(graded, "c" * 64)
    login(client, "viewer")
    for grader, template in ((first, None), (twin, "c" * 20)):
        page = client.get("/c/sample/leaderboard", params={"grader": grader}).text
        links = re.findall(r'href="([^"]*(?:leaderboard\.\w+|qrels)[^"]*)"', page)
        assert links and all(f"grader={grader}" in link for link in links), links
        exported = client.get("/c/sample/leaderboard.json", params={"grader": grader})
        assert exported.headers["X-Grader-Id"] == str(grader)
        if template:
            assert template in exported.json()["settings"]["grader"]
        assert client.get("/c/sample/qrels", params={"grader": grader}).headers["X-Grader-Id"] == str(grader)
    # no grader in the URL: the links name the primary grader (equally complete: the newer, the twin),
    # so the export is what the page showed
    default = client.get("/c/sample/leaderboard").text
    assert _shown_grader(default) == twin and f"grader={twin}" in default and f"grader={first}" not in default


def test_a_rubric_edit_regrade_says_which_grader_it_uses(client: TestClient, graded: Database) -> None:
    _twin(graded, "b" * 64, every=5)
    token = login(client, "judge")
    response = client.post(
        f"/c/sample/rubric/{Q}/save",
        data={"action": "add", "text": "Do bees dream?"},
        headers={"X-CSRF-Token": token, "HX-Request": "true"},
    )
    assert response.status_code == 200
    spec = GraderSpec()
    assert f"with {spec.model_name} / {spec.prompt_class}" in response.text
