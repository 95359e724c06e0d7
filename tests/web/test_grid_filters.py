"""The grid's filters, sort and paging over HTTP: every control, changed alone from its default state,
answers 200; paging keeps every setting; a cell shows the model's grade beside the judge's, with who
and when; flags show in the column headers; viewers get no editing controls."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.models import Grade, PoolEntry, Query
from app.web import grid_view
from app.web.main import create_app
from tests.conftest import Database
from tests.web.conftest import login

HTMX = {"HX-Request": "true"}


@pytest.fixture
def any_client(web_db_any: Database) -> Iterator[TestClient]:
    with TestClient(create_app()) as test_client:
        yield test_client


def _defaults(page: str) -> dict[str, str]:
    """The filter form's values as the browser would send them before any change."""
    form = page[page.index('<form class="filters"') : page.index("</form>", page.index('<form class="filters"'))]
    values = {}
    for select_ in re.finditer(r'<select name="(\w+)"[^>]*>(.*?)</select>', form, re.S):
        options = re.findall(r"<option( value=\"([^\"]*)\")?([^>]*)>([^<]*)</option>", select_.group(2))
        chosen = next((o for o in options if "selected" in o[2]), options[0])
        values[select_.group(1)] = chosen[1] if chosen[0] else chosen[3]
    return values


def _passages(fragment: str) -> list[str]:
    return re.findall(r'<tr data-entry="\d+" data-passage="([^"]*)"', fragment)


def test_filters_and_sorts_from_their_default_state(client: TestClient, web_db: Database) -> None:
    login(client, "viewer")
    page = client.get("/c/sample/grid/bees")
    assert page.status_code == 200
    defaults = _defaults(page.text)
    grader = defaults.pop("grader")
    assert defaults == {"system": "", "judged": "any", "min_grade": "", "sort": "grade", "compact": "auto"}
    defaults["grader"] = grader
    assert client.get("/c/sample/grid/bees", params=defaults, headers=HTMX).status_code == 200
    every = set(_passages(client.get("/c/sample/grid/bees", params=defaults, headers=HTMX).text))
    changes = [{"min_grade": g} for g in ("0", "3", "5")] + [{"judged": j} for j in ("judged", "unjudged")]
    changes += [{"disagree": "true"}] + [{"sort": s} for s in grid_view.SORTS]
    changes += [{"compact": v} for v in grid_view.COMPACT]
    for change in changes:
        response = client.get("/c/sample/grid/bees", params={**defaults, **change}, headers=HTMX)
        assert response.status_code == 200, (change, response.text)
        assert set(_passages(response.text)) <= every, change
    by_id = _passages(client.get("/c/sample/grid/bees", params={**defaults, "sort": "passage"}, headers=HTMX).text)
    assert by_id == sorted(by_id)
    judged = client.get("/c/sample/grid/bees", params={**defaults, "judged": "judged"}, headers=HTMX).text
    unjudged = client.get("/c/sample/grid/bees", params={**defaults, "judged": "unjudged"}, headers=HTMX).text
    assert set(_passages(judged)) | set(_passages(unjudged)) == every
    assert not set(_passages(judged)) & set(_passages(unjudged))
    restore = {**HTMX, "HX-History-Restore-Request": "true"}  # back to a pushed URL: the whole page
    assert "<html" in client.get("/c/sample/grid/bees", params=defaults, headers=restore).text
    assert "<html" not in client.get("/c/sample/grid/bees", params=defaults, headers=HTMX).text
    for hostile in ({"min_grade": "9"}, {"sort": "drop table"}, {"compact": "x"}, {"judged": "maybe"}):
        response = client.get("/c/sample/grid/bees", params={**defaults, **hostile}, headers=HTMX)
        assert response.status_code == 422 and "{" not in response.text, hostile


def test_paging_and_query_links_keep_every_setting(
    client: TestClient, web_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(grid_view, "PAGE_SIZE", 2)  # the sample's pools are shorter than a real page
    login(client, "viewer")
    settings = {"system": "", "judged": "any", "min_grade": "0", "sort": "passage", "compact": "on"}
    first = client.get("/c/sample/grid/bees", params=settings, headers=HTMX).text
    link = re.search(r'data-testid="next-page" href="([^"]+)"', first)
    assert link, first
    target = html.unescape(link.group(1))
    for key, value in {**settings, "page": "2"}.items():
        assert f"{key}={value}" in target, (key, target)
    assert "grader=" in target
    second = client.get(target, headers=HTMX).text
    assert 'id="grid" class="compact"' in second and "page 2/" in second
    both = _passages(first) + _passages(second)
    assert both == sorted(both) and len(set(both)) == 4
    previous = re.search(r'data-testid="previous-page" href="([^"]+)"', second)
    assert previous and "min_grade=0" in html.unescape(previous.group(1))

    # the previous/next query links keep the settings too
    page = client.get("/c/sample/grid/bees", params={"sort": "judgment", "compact": "off", "disagree": "true"}).text
    position = re.search(r'data-testid="query-position">query (\d+) of (\d+)<', page)
    assert position and 1 <= int(position.group(1)) <= int(position.group(2))
    links = re.findall(r'rel="(?:prev|next)" data-testid="\w+-query" href="([^"]+)"', page)
    assert links and all(
        {"sort=judgment", "disagree=true", "compact=off"} <= set(link.split("&")) for link in map(html.unescape, links)
    )


def _first_graded_cell(database: Database) -> tuple[int, str, int, str]:
    with database.session() as session:
        row = session.execute(
            select(Grade.pool_entry_pk, Grade.item_id, Grade.self_rating, Query.query_id)
            .join(PoolEntry, PoolEntry.id == Grade.pool_entry_pk)
            .join(Query, Query.id == PoolEntry.query_pk)
            .where(Grade.self_rating.is_not(None))
            .order_by(Grade.id)
        ).first()
        assert row is not None
        return row[0], row[1], row[2], row[3]


def _cell_html(page: str, entry: int, item: str) -> str:
    row = page[page.index(f'<tr data-entry="{entry}"') :]
    row = row[: row.index("</tr>")]
    start = row.index(f'data-item="{html.escape(item)}"')
    return row[start : row.index("</td>", start)]


def test_cell_shows_suggestion_and_response_and_flags_persist(any_client: TestClient, web_db_any: Database) -> None:
    entry, item, model, query = _first_graded_cell(web_db_any)
    token = login(any_client, "judge")
    response = 0 if model else 5
    headers = {"X-CSRF-Token": token}
    data = {"pool_entry": entry, "item_id": item, "rating": response, "action": "set"}
    assert any_client.post("/c/sample/override", data=data, headers=headers).status_code == 200
    assert any_client.post("/c/sample/flag", data={"item_id": item}, headers=headers).status_code == 200
    page = any_client.get(f"/c/sample/grid/{query}", params={"compact": "off", "sort": "passage"}).text
    cell = _cell_html(page, entry, item)
    assert f'<span class="grade">{response}</span><span class="human" >✎</span>' in cell
    assert f'<span class="sugg" >model {model}</span>' in cell
    assert re.search(r'<span class="who" >judge · \d{4}-\d\d-\d\d \d\d:\d\d UTC</span>', cell)
    assert f"judge's grade {response} by judge at" in cell
    assert 'class="clear"' in cell
    head = page[page.index(f'class="item-head flagged" data-item="{html.escape(item)}"') :]
    assert re.search(r"flagged by judge · \d{4}-\d\d-\d\d \d\d:\d\d UTC", head[: head.index("</th>")])
    assert 'class="link unflag"' in head[: head.index("</th>")]
    login(any_client, "viewer")
    seen = any_client.get(f"/c/sample/grid/{query}", params={"compact": "off"}).text
    assert "flagged by judge" in seen and "Read only" in seen
    assert 'class="clear"' not in seen and 'class="link unflag"' not in seen and "a accept" not in seen
    assert "<li>0–5" not in seen
