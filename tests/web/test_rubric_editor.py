"""The rubric editor and its history: save messages, descriptive notes, diffs of edits, revert, navigation, flags."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.models import BankItem, Collection, Job, Passage, Query, RubricVersion
from app.rubrics.editing import describe
from app.rubrics.service import latest_version, version_item_pks
from app.web.main import create_app
from tests.conftest import Database
from tests.web.conftest import login

Q = "bees"
HTMX = {"HX-Request": "true"}


@pytest.fixture
def any_client(web_db_any: Database) -> Iterator[TestClient]:
    with TestClient(create_app()) as test_client:
        yield test_client


def _items(database: Database, query_id: str = Q) -> list[tuple[str, str]]:
    """(item id, text) of the query's items in the newest version, in order."""
    with database.session() as session:
        version = latest_version(session, session.scalars(select(Collection).filter_by(name="sample")).one())
        pks = version_item_pks(session, version)
        rows = {
            pk: (item_id, text)
            for pk, item_id, text in session.execute(
                select(BankItem.id, BankItem.item_id, BankItem.text)
                .join(Query, Query.id == BankItem.query_pk)
                .where(BankItem.id.in_(pks), Query.query_id == query_id)
            )
        }
        return [rows[pk] for pk in pks if pk in rows]


def _newest(database: Database) -> RubricVersion:
    with database.session() as session:
        version = session.scalars(select(RubricVersion).order_by(RubricVersion.number.desc())).first()
        assert version is not None
        session.expunge(version)
        return version


def _text(html: str) -> str:
    """The page's text as a reader sees it: inline tags dropped, cells and lines kept apart by one space."""
    spaced = re.sub(r"</?(td|th|tr|li|p|div|h\d)\b[^>]*>", " ", html)
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", spaced)))


def test_a_note_left_empty_says_what_changed() -> None:
    assert describe(["edited q2 of bees"]) == "edited q2 of bees"
    assert describe(["added 1 question to bees"] * 3 + ["deleted q1 of bread"]) == (
        "added 3 questions to bees; deleted q1 of bread"
    )
    assert describe([f"edited q{i} of bees" for i in range(1, 7)]).endswith("; and 2 more changes")


def test_saves_say_their_version_link_the_diff_and_the_job_and_note_what_changed(
    any_client: TestClient, web_db_any: Database
) -> None:
    token = login(any_client, "judge")
    headers = {"X-CSRF-Token": token}
    (first_id, first_text), (second_id, second_text) = _items(web_db_any)[:2]
    before = _newest(web_db_any).number

    edit = {"action": "edit", "item_id": second_id, "expected_text": second_text, "text": "Do bees sleep at night?"}
    page = any_client.post(f"/c/sample/rubric/{Q}/save", data=edit, headers=headers | HTMX)
    assert page.status_code == 200, page.text
    saved = before + 1
    text = _text(page.text)
    assert f"Saved as version {saved}: edited q2 of {Q}." in text
    assert f"/c/sample/history?a={before}&amp;b={saved}" in page.text
    assert "/c/sample/leaderboard" in page.text
    with web_db_any.session() as session:
        job = session.scalars(select(Job).order_by(Job.id.desc())).first()
        assert job is not None and job.kind == "regrade"
        job_id, cells = job.id, job.total
    assert f'href="/jobs/{job_id}"' in page.text and f"{cells} cells to grade with" in text and cells > 0

    # without htmx the message survives the redirect
    add = {"action": "add", "text": "How far do bees fly?"}
    redirect = any_client.post(f"/c/sample/rubric/{Q}/save", data=add, headers=headers, follow_redirects=False)
    assert redirect.status_code == 303 and f"saved={saved + 1}" in redirect.headers["location"]
    followed = _text(any_client.get(redirect.headers["location"]).text)
    assert f"Saved as version {saved + 1}: added 1 question to {Q}." in followed and "cells to grade with" in followed

    moved = {"action": "move", "item_id": first_id, "expected_text": first_text, "position": "1"}
    assert any_client.post(f"/c/sample/rubric/{Q}/save", data=moved, headers=headers | HTMX).status_code == 200
    *_, gone = kept = _items(web_db_any)
    delete = {"action": "delete", "item_id": gone[0], "expected_text": gone[1]}
    deleted = any_client.post(f"/c/sample/rubric/{Q}/save", data=delete, headers=headers | HTMX)
    assert "no cells to grade" in _text(deleted.text)
    noted = {"action": "add", "text": "Do bees hum?", "note": "judges asked for it"}
    any_client.post(f"/c/sample/rubric/{Q}/save", data=noted, headers=headers | HTMX)

    history = _text(any_client.get("/c/sample/history").text)
    for note in (
        f"edited q2 of {Q}",
        f"added 1 question to {Q}",
        f"moved q1 of {Q} to q2",
        f"deleted q{len(kept)} of {Q}",
        "judges asked for it",
    ):
        assert note in history, note
    assert "edit 1" not in history and f" {saved} published judge " in history

    # the diff of the edit shows the old and the new text, with the query
    diff = any_client.get("/c/sample/history", params={"a": before, "b": saved})
    edited = _text(re.search(r'<li class="edited".*?</li>', diff.text, re.S).group(0))  # type: ignore[union-attr]
    assert f"edited {Q}: {second_text} → Do bees sleep at night?" in edited
    assert "1 edited" in _text(diff.text) and "removed" not in edited
    # across several versions too: the edit's chain is followed through the versions in between
    span = _text(any_client.get("/c/sample/history", params={"a": before, "b": saved + 4}).text)
    assert f"~ edited {Q}: {second_text} → Do bees sleep at night?" in span
    assert f"+ added {Q}: Do bees hum?" in span and "How far do bees fly?" not in span  # added, then deleted
    assert f"↕ moved {Q}: {first_text} (q1 → q2)" in span


def test_a_passage_without_a_question_is_shown_beside_the_prefilled_form(
    any_client: TestClient, web_db_any: Database
) -> None:
    with web_db_any.session() as session:
        passage_id, passage_text = session.execute(select(Passage.passage_id, Passage.text)).first()  # type: ignore[misc]
    login(any_client, "judge")
    page = any_client.get(f"/c/sample/rubric/{Q}", params={"from_passage": passage_id})
    assert page.status_code == 200
    box = _text(re.search(r'data-testid="from-passage".*?</form>', page.text, re.S).group(0))  # type: ignore[union-attr]
    assert f"Passage {passage_id}" in box and _text(passage_text).strip() in box
    first_sentence = passage_text.split(". ")[0][:300]
    assert 'value="' in page.text and _text(first_sentence).strip()[:40] in unescape(page.text)
    unknown = any_client.get(f"/c/sample/rubric/{Q}", params={"from_passage": "no-such-passage"})
    assert unknown.status_code == 200 and 'data-testid="from-passage"' not in unknown.text


def test_revert_states_what_it_will_do_then_does_it(any_client: TestClient, web_db_any: Database) -> None:
    token = login(any_client, "judge")
    headers = {"X-CSRF-Token": token}
    target = _newest(web_db_any).number
    items_then = _items(web_db_any)
    doomed = items_then[0]
    delete = {"action": "delete", "item_id": doomed[0], "expected_text": doomed[1]}
    any_client.post(f"/c/sample/rubric/{Q}/save", data=delete, headers=headers | HTMX)
    any_client.post(f"/c/sample/rubric/{Q}/save", data={"action": "add", "text": "Do bees dance?"}, headers=headers)
    current = target + 2
    with web_db_any.session() as session:
        total = len(version_item_pks(session, session.scalars(select(RubricVersion).filter_by(number=target)).one()))

    history = any_client.get("/c/sample/history").text
    assert f'href="/c/sample/history?revert={target}"' in history and f"history?revert={current}" not in history
    confirm = any_client.get("/c/sample/history", params={"revert": target})
    summary = _text(re.search(r'data-testid="revert-summary".*?</p>', confirm.text, re.S).group(0))  # type: ignore[union-attr]
    assert f"Revert to version {target}: creates version {current + 1} with {total} questions" in summary
    assert f"(adds 1, removes 1, compared with the current version {current})" in summary
    cells = int(re.search(r"regrades (\d+) cells with", summary).group(1))  # type: ignore[union-attr]
    assert cells > 0  # the deleted question's cells, one per pooled passage of its query
    assert _newest(web_db_any).number == current  # a confirmation writes nothing

    done = any_client.post(f"/c/sample/revert/{target}", headers=headers, follow_redirects=False)
    assert done.status_code == 303 and f"reverted={current + 1}" in done.headers["location"]
    page = _text(any_client.get(done.headers["location"]).text)
    assert f"Saved as version {current + 1}: revert to version {target}." in page
    assert f"{cells} cells to grade with" in page
    assert _items(web_db_any) == items_then
    # the current version cannot be reverted to; a draft is never published by a revert
    again = any_client.post(f"/c/sample/revert/{current + 1}", headers=headers, follow_redirects=False)
    assert again.status_code == 409
    assert any_client.get("/c/sample/history", params={"revert": current + 1}).status_code == 409
    login(any_client, "viewer")
    assert 'data-testid="revert-confirm"' not in any_client.get("/c/sample/history", params={"revert": target}).text


def test_previous_and_next_query_links(any_client: TestClient, web_db_any: Database) -> None:
    with web_db_any.session() as session:
        ids = list(session.scalars(select(Query.query_id).order_by(Query.position, Query.id)))
    login(any_client, "viewer")
    first = any_client.get(f"/c/sample/rubric/{ids[0]}").text
    assert f"query 1 of {len(ids)}" in first and 'rel="prev"' not in first
    assert f'rel="next" aria-keyshortcuts="]" href="/c/sample/rubric/{ids[1]}"' in first
    last = any_client.get(f"/c/sample/rubric/{ids[-1]}").text
    assert f"query {len(ids)} of {len(ids)}" in last and 'rel="next"' not in last
    assert f'href="/c/sample/rubric/{ids[-2]}"' in last


def test_flags_show_who_when_why_and_a_judge_unflags_from_the_rubric_page(
    any_client: TestClient, web_db_any: Database
) -> None:
    item_id, _ = _items(web_db_any)[0]
    token = login(any_client, "judge")
    headers = {"X-CSRF-Token": token}
    page = any_client.get(f"/c/sample/rubric/{Q}").text
    assert 'hx-post="/c/sample/flag"' in page and 'data-redraw="/c/sample/rubric/bees"' in page
    flagged = any_client.post("/c/sample/flag", data={"item_id": item_id, "reason": "off-topic"}, headers=headers)
    assert flagged.is_success
    # the redraw the page makes after a flag or unflag: the items block only
    items = any_client.get(f"/c/sample/rubric/{Q}", headers=HTMX).text
    assert items.lstrip().startswith('<div id="items">') or '<div id="items">' in items[:2000]
    flag = _text(re.search(r'data-testid="flag".*?</div>', items, re.S).group(0))  # type: ignore[union-attr]
    assert "flagged by judge on" in flag and "UTC: off-topic" in flag and "unflag" in flag
    assert 'hx-post="/c/sample/unflag"' in items
    assert any_client.post("/c/sample/unflag", data={"item_id": item_id}, headers=headers).is_success
    assert 'data-testid="flag"' not in any_client.get(f"/c/sample/rubric/{Q}", headers=HTMX).text
    login(any_client, "viewer")
    assert "/unflag" not in any_client.get(f"/c/sample/rubric/{Q}").text
