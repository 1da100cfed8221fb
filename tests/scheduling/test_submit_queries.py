"""A submission through the API costs a few statements whatever the user holds
(the hottest write): the token (one lookup, not a sweep of the user's other tokens), the cluster
with its shape, the user's roles with the admin group, the project, and on PostgreSQL one insert
of the job with its first event (no BEGIN/COMMIT around it); elsewhere the two inserts in a
transaction."""

import json

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from portal.tokens import issue_token

pytestmark = pytest.mark.django_db
JOB = {
    "name": "q", "project": "nlp/olmo", "cluster": "jupiter", "gpus": 1, "min_runtime_s": 600,
    "resumable": True, "kind": "batch", "command": "python train.py", "sim_duration_s": 600,
}  # fmt: skip


def _statements(client) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        response = client.post("/api/v1/jobs/", json.dumps(JOB), content_type="application/json")
    assert response.status_code == 201, response.content
    return [q["sql"] for q in queries.captured_queries]


def test_a_submission_costs_five_statements_however_many_tokens_its_user_holds(researcher, cluster):
    _, secret = issue_token(researcher)
    client = Client(HTTP_AUTHORIZATION=f"Token {secret}")
    first = _statements(client)
    if connection.vendor == "postgresql":  # (the test's transaction turns BEGIN into SAVEPOINT)
        assert len(first) == 5 and not [sql for sql in first if "SAVEPOINT" in sql], first
        assert first[-1].startswith('WITH p AS (INSERT INTO "scheduling_job"'), first[-1]
    else:  # + the event's own insert, in a transaction
        assert len([sql for sql in first if "SAVEPOINT" not in sql]) == 6, first
    for _ in range(20):  # every CLI login adds a token
        issue_token(researcher)
    assert len(_statements(client)) == len(first)
