"""Small helpers shared by the budget tests."""

from django.db import connection
from django.test.utils import CaptureQueriesContext


def queries_to_get(client, url) -> int:
    """How many queries a successful GET of ``url`` costs."""
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)
