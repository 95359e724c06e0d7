"""The web fixtures (the sample collection graded, one user per role) for the leaderboard tests."""

from tests.web.conftest import client, web_db, web_db_any  # noqa: F401
