"""The grid's filter form works from its default state: every control, changed alone, answers 200."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from tests.conftest import Database
from tests.web.conftest import login


def _defaults(page: str) -> dict[str, str]:
    """The filter form's values as the browser would send them before any change."""
    form = page[page.index('<form class="filters"') : page.index("</form>", page.index('<form class="filters"'))]
    values = {}
    for select in re.finditer(r'<select name="(\w+)">(.*?)</select>', form, re.S):
        options = re.findall(r"<option( value=\"([^\"]*)\")?[^>]*>([^<]*)</option>", select.group(2))
        chosen = next((o for o in options if "selected" in o[0]), options[0])
        values[select.group(1)] = chosen[1] if chosen[0] else chosen[2]
    return values


def test_filters_from_their_default_state(client: TestClient, web_db: Database) -> None:
    login(client, "viewer")
    page = client.get("/c/sample/grid/bees")
    assert page.status_code == 200
    defaults = _defaults(page.text)
    assert defaults == {"system": "", "judged": "any", "min_grade": ""}
    headers = {"HX-Request": "true"}
    response = client.get("/c/sample/grid/bees", params=defaults, headers=headers)
    assert response.status_code == 200, response.text
    for grade in ("0", "3", "5"):
        response = client.get("/c/sample/grid/bees", params={**defaults, "min_grade": grade}, headers=headers)
        assert response.status_code == 200, response.text
    for judged in ("judged", "unjudged"):
        assert client.get("/c/sample/grid/bees", params={**defaults, "judged": judged}, headers=headers).is_success
    checked = {**defaults, "disagree": "true"}
    assert client.get("/c/sample/grid/bees", params=checked, headers=headers).is_success
    assert client.get("/c/sample/grid/bees", params={**defaults, "min_grade": "9"}).status_code == 422
