"""The rubric editor edits an item's importance, weight and sub-nuggets; the history diff shows them; hostile
forms are refused with the field named; a judge edits sub-nuggets with the keyboard in Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.collections.service import CollectionWriter
from app.models import BankItem, Collection
from app.rubrics.service import ItemSpec, create_version, latest_version, store_items, version_item_pks
from app.web.main import create_app
from tests.conftest import Database
from tests.web.conftest import login
from tests.web.test_accessibility import AXE, BLOCKING, RUN_AXE, _describe
from tests.web.test_browser import SHOTS, Session, browser, server  # noqa: F401

Q = "bees"
HTMX = {"HX-Request": "true"}
TEXT = "Bees dance to tell where food is"
STRUCTURE = {
    "op": "and",
    "children": [
        {"id": "bees/dir", "text": "The dance gives the direction", "kind": "nugget"},
        {"id": "bees/dist", "text": "The dance gives the distance", "kind": "nugget"},
    ],
}


def add_structured_item(database: Database) -> None:
    """A new version of "sample" with a vital nugget with two AND sub-nuggets appended to query bees."""
    with database.session() as session:
        collection = session.scalars(select(Collection).filter_by(name="sample")).one()
        spec = ItemSpec(Q, "bees/dance", "nugget", TEXT, None, None, None, importance="vital", structure=STRUCTURE)
        (pk,) = store_items(session, collection, CollectionWriter(session, collection), [spec])
        base = version_item_pks(session, latest_version(session, collection))
        create_version(session, collection, [*base, pk], created_by="import", note="nuggets")
        session.commit()


def _item(database: Database, item_id: str = "bees/dance") -> BankItem:
    with database.session() as session:
        collection = session.scalars(select(Collection).filter_by(name="sample")).one()
        pks = version_item_pks(session, latest_version(session, collection))
        item = session.scalars(select(BankItem).where(BankItem.id.in_(pks), BankItem.item_id == item_id)).one()
        session.expunge(item)
        return item


@pytest.fixture
def judge_client(web_db_any: Database) -> Iterator[tuple[TestClient, dict[str, str]]]:
    add_structured_item(web_db_any)
    with TestClient(create_app()) as client:
        yield client, {"X-CSRF-Token": login(client, "judge")}


def _form(item: BankItem, **fields: Any) -> dict[str, Any]:
    """The edit form as the page sends it: the item as it is, then ``fields``."""
    children = item.structure["children"] if item.structure else []
    form: dict[str, Any] = {
        "action": "edit",
        "item_id": item.item_id,
        "expected_text": item.text,
        "expected_hash": item.content_hash,
        "text": item.text,
        "importance": item.importance or "",
        "weight": "" if item.weight is None else f"{item.weight:g}",
        "sub_op": (item.structure or {}).get("op", "or"),
        "sub_id": [c["id"] for c in children] + [""],
        "sub_text": [c["text"] for c in children] + [""],
    }
    return form | fields


def test_the_editor_saves_importance_weight_and_sub_nuggets_and_the_diff_shows_them(
    judge_client: tuple[TestClient, dict[str, str]], web_db_any: Database
) -> None:
    client, headers = judge_client
    page = client.get(f"/c/sample/rubric/{Q}").text
    item = _item(web_db_any)
    assert f'name="expected_hash" value="{item.content_hash}"' in page and 'data-testid="sub-edit"' in page
    assert page.count('name="sub_text"') >= 3 + 2  # this item's two rows and a blank row per item (and templates)

    # the first sub-nugget edited, the second cleared (removed), one added in the blank row; or; weight; okay
    form = _form(
        item,
        importance="okay",
        weight="2.5",
        sub_op="or",
        sub_text=["The dance points the way", "", "Longer waggles mean farther food"],
    )
    saved = client.post(f"/c/sample/rubric/{Q}/save", data=form, headers=headers | HTMX)
    assert saved.status_code == 200, saved.text[:500]
    assert (
        "nugget 1 of bees: importance vital → okay, weight default → 2.5, sub-nuggets and → or, and 3 more"
        in saved.text
    )
    item = _item(web_db_any)
    assert (item.importance, item.weight, item.structure["op"]) == ("okay", 2.5, "or")
    assert [(c["id"], c["text"]) for c in item.structure["children"]] == [
        ("bees/dir", "The dance points the way"),
        (item.structure["children"][1]["id"], "Longer waggles mean farther food"),
    ]
    assert 'data-testid="weight"' in saved.text and 'value="2.5"' in saved.text
    with web_db_any.session() as session:
        number = latest_version(session, session.scalars(select(Collection).filter_by(name="sample")).one()).number  # type: ignore[union-attr]
    diff = client.get(f"/c/sample/history?a={number - 1}&b={number}").text
    for change in (
        "importance vital → okay",
        "weight default → 2.5",
        "sub-nuggets and → or",
        "sub-nugget edited: The dance gives the direction → The dance points the way",
        "sub-nugget added: Longer waggles mean farther food",
        "sub-nugget removed: The dance gives the distance",
    ):
        assert f"<li>{change}</li>" in diff, change
    assert "<del>" not in diff.split('data-testid="diff"')[1].split("</section>")[0]  # the text did not change

    # a form from before that save is a conflict now, even though the text is the same
    stale = client.post(f"/c/sample/rubric/{Q}/save", data=form | {"weight": "3"}, headers=headers | HTMX)
    assert stale.status_code == 409 and "importance, weight or sub-nuggets changed" in stale.text


HOSTILE: list[tuple[dict[str, Any], int, str]] = [
    ({"weight": "nan"}, 400, "weight: a finite number"),
    ({"weight": "-inf"}, 400, "weight: a finite number"),
    ({"weight": "1e999"}, 400, "weight: a finite number"),
    ({"weight": "1001"}, 400, "weight: a finite number from 0 to 1000"),
    ({"weight": "heavy"}, 400, "weight: a number, got"),
    ({"weight": "9" * 41}, 422, "weight"),
    ({"sub_op": "xor"}, 400, "structure.op: sub-nuggets combine with"),
    ({"sub_op": "x" * 21}, 422, "sub_op"),
    ({"sub_id": ["", ""], "sub_text": ["a"]}, 400, "sub_id: one per sub_text"),
    ({"sub_id": [""] * 51, "sub_text": [f"c{i}" for i in range(51)]}, 400, "structure.children: at most 50"),
    ({"sub_id": [""], "sub_text": ["x" * 2001]}, 400, "structure.children[0].text: at most 2000 characters"),
    ({"sub_id": [""], "sub_text": ["a\x00b"]}, 400, "structure.children[0].text: at most 2000 characters, no NUL"),
    ({"sub_id": ["bees/nobody"], "sub_text": ["a"]}, 400, "structure.children[0].id: the item has no sub-nugget"),
    ({"expected_hash": "not-hex"}, 422, "expected_hash"),
    ({"importance": "crucial"}, 422, "importance"),
]


def test_hostile_edit_forms_are_refused_naming_the_field(judge_client: tuple[TestClient, dict[str, str]]) -> None:
    client, headers = judge_client
    item = _item_any(client)
    for fields, status, message in HOSTILE:
        response = client.post(f"/c/sample/rubric/{Q}/save", data=_form(item, **fields), headers=headers | HTMX)
        assert response.status_code == status, (fields, response.text[:300])
        assert message in response.text.replace("&#39;", "'"), (fields, response.text[:300])


def _item_any(client: TestClient) -> BankItem:
    from app.db import session_scope

    with session_scope() as session:
        item = session.scalars(select(BankItem).where(BankItem.item_id == "bees/dance")).one()
        session.expunge(item)
        return item


def test_a_judge_edits_sub_nuggets_with_the_keyboard(server: str, browser: object, web_db: Database) -> None:  # noqa: F811
    add_structured_item(web_db)
    judge = Session(browser, server, "judge")
    page = judge.page
    judge.visit(f"/c/sample/rubric/{Q}")
    item = page.locator("li.item", has_text=TEXT)
    toggle = item.get_by_role("button", name="edit sub-nuggets (2)")
    assert toggle.get_attribute("aria-expanded") == "false" and item.locator("fieldset").is_hidden()
    toggle.focus()
    page.keyboard.press("Enter")  # opens the sub-nugget editor
    assert toggle.get_attribute("aria-expanded") == "true"
    first = item.get_by_label("sub-nugget 1", exact=True)
    first.fill("The dance points the way")
    item.get_by_role("button", name="remove sub-nugget 2").focus()
    page.keyboard.press("Enter")
    assert item.locator("input[name=sub_text]").count() == 2  # the removed row is gone; the blank row stays
    item.get_by_role("button", name="add another sub-nugget").focus()
    page.keyboard.press("Enter")
    added = item.locator("input[name=sub_text]").last
    assert added.evaluate("field => field === document.activeElement")  # focus lands in the new row
    page.keyboard.type("Longer waggles mean farther food")
    item.locator("select[name=sub_op]").select_option("or")
    item.locator("input[name=weight]").fill("2")
    item.locator("[data-testid=sub-save]").click()
    page.locator("[data-testid=saved]").wait_for(timeout=30_000)
    assert "sub-nuggets and → or" in page.locator("[data-testid=saved]").inner_text()
    saved = _item(web_db)
    assert saved.weight == 2.0 and [c["text"] for c in saved.structure["children"]] == [
        "The dance points the way",
        "Longer waggles mean farther food",
    ]
    fresh = page.locator("li.item", has_text=TEXT)
    assert "any of:" in fresh.locator("[data-testid=sub-nuggets]").inner_text()
    fresh.locator("[data-sub-toggle]").click()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "rubric-nuggets-sample.png"), full_page=True)

    add_dl19_sized_nuggets(web_db)  # DL19's shape: 43 queries of 10 nuggets, each with importance and sub-nuggets
    judge.visit("/c/nuggets-dl/rubric/q0")
    assert page.locator("li.item").count() == 10 and page.locator("[data-testid=sub-nuggets]").count() == 10
    page.locator("[data-sub-toggle]").nth(1).click()
    page.screenshot(path=str(SHOTS / "rubric-nuggets-dl19.png"), full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")  # nothing wider than the window
    assert judge.errors == []
    # the open sub-nugget editor passes axe as the other pages do (bypass_csp: only to inject axe)
    signed_in = judge.context.storage_state()
    checked = browser.new_context(bypass_csp=True, storage_state=signed_in).new_page()  # type: ignore[attr-defined]
    checked.goto(f"{server}/c/nuggets-dl/rubric/q0")
    checked.locator("[data-sub-toggle]").nth(1).click()
    checked.add_script_tag(path=str(AXE / "axe.min.js"))
    violations = [v for v in checked.evaluate(RUN_AXE) if v["impact"] in BLOCKING]
    assert not violations, _describe(violations)
    checked.context.close()
    assert judge.errors == []
    judge.close()


def add_dl19_sized_nuggets(database: Database) -> None:
    from app.collections.service import ensure_collection

    with database.session() as session:
        collection = ensure_collection(session, "nuggets-dl")
        writer = CollectionWriter(session, collection)
        specs = []
        for q in range(43):
            writer.ensure_query(f"q{q}", f"query {q}: what do honeybees communicate with the waggle dance")
            for n in range(10):
                children = [
                    {
                        "id": f"q{q}/n{n}/c{c}",
                        "text": f"Sub-nugget {c + 1} of nugget {n + 1}: the dance shows it",
                        "kind": "nugget",
                    }
                    for c in range(2 + n % 3)
                ]
                specs.append(
                    ItemSpec(
                        f"q{q}",
                        f"q{q}/n{n}",
                        "nugget",
                        f"Nugget {n + 1}: the waggle run's angle to the vertical gives the direction of the food",
                        None,
                        None,
                        None,
                        importance=("vital", "okay")[n % 2],
                        weight=2.0 if n == 0 else None,
                        structure={"op": ("and", "or")[n % 2], "children": children},
                    )
                )
        create_version(
            session, collection, store_items(session, collection, writer, specs), created_by="import", note=""
        )
        session.commit()
