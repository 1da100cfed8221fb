"""JSON bodies are refused with a 400 naming the field, before any view or service runs, when
they nest too deep (json's recursive decoder raised RecursionError: a 500 for anyone, even
unauthenticated) or carry a lone surrogate (``"\\ud800"``: valid JSON, but no UTF-8 can hold
it, so the row saved on SQLite broke every later read of the list)."""

import json

import pytest

from exceptions.models import ExceptionRequest
from scheduling.models import Job

DEEP = "[" * 1000 + "]" * 1000
LONE = "\ud800"


def post_raw(client, url, text):
    return client.post(url, text.encode(), content_type="application/json")


@pytest.mark.parametrize("url", ["/api/v1/auth/token/", "/api/v1/jobs/", "/api/v1/whatif/"])
def test_deeply_nested_json_is_a_400_not_a_500(client, researcher, url):
    if url != "/api/v1/auth/token/":
        client.force_login(researcher)
    body = '{"username": ' + DEEP + ', "password": "x"}'
    assert len(body) < 2100
    response = post_raw(client, url, body)
    assert response.status_code == 400
    assert "deep" in response.json()["message"]


def test_unauthenticated_deep_json_on_the_token_endpoint_is_a_400(client, db):
    response = post_raw(client, "/api/v1/auth/token/", DEEP)
    assert response.status_code == 400


def test_ordinary_nesting_still_parses(client, researcher, cluster):
    client.force_login(researcher)
    body = {"name": "x", "project": "nlp/olmo", "cluster": "jupiter", "gpus": 1}
    body.update(min_runtime_s=3600, env={"A": "1"})
    response = post_raw(client, "/api/v1/jobs/", json.dumps(body))
    assert response.status_code == 201, response.json()


def job_body(**extra):
    body = {"name": "x", "project": "nlp/olmo", "cluster": "jupiter", "gpus": 1}
    body.update(min_runtime_s=3600, **extra)
    return body


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"env": {"A": LONE}}, "env"),
        ({"env": {"A" + LONE: "x"}}, "env"),
        ({"kind": LONE}, "kind"),
        ({"priority": LONE}, "priority"),
        ({"name": "x" + LONE}, "name"),
        ({"command": LONE}, "command"),
    ],
)
def test_a_lone_surrogate_in_a_job_is_a_400_naming_the_field_and_saves_nothing(
    client, researcher, cluster, extra, field
):
    client.force_login(researcher)
    response = post_raw(client, "/api/v1/jobs/", json.dumps(job_body(**extra)))
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert Job.objects.count() == 0
    assert client.get("/api/v1/jobs/").status_code == 200


def test_a_lone_surrogate_in_an_exception_kind_is_a_400(client, researcher):
    client.force_login(researcher)
    body = {"kind": LONE, "justification": "x"}
    response = post_raw(client, "/api/v1/exceptions/", json.dumps(body))
    assert response.status_code == 400
    assert response.json()["field"] == "kind"
    assert ExceptionRequest.objects.count() == 0


def test_a_lone_surrogate_in_a_whatif_grant_key_is_a_400(client, leader, budget_tree):
    client.force_login(leader)
    body = {"weeks": 1, "grants": {"nlp/olmo" + LONE: 10}}
    response = post_raw(client, "/api/v1/whatif/", json.dumps(body))
    assert response.status_code == 400
    assert response.json()["field"] == "grants"


def test_a_surrogate_pair_is_an_ordinary_character(client, researcher, cluster):
    client.force_login(researcher)
    response = post_raw(client, "/api/v1/jobs/", json.dumps(job_body(name="run \U0001f600")))
    assert response.status_code == 201, response.json()
    assert Job.objects.get().name == "run \U0001f600"


@pytest.mark.parametrize("charset", ["utf-8", "utf-16-le"])
def test_a_form_post_cannot_carry_a_lone_surrogate_into_a_job(client, researcher, cluster, charset):
    """Django decodes form bodies with errors="replace": the bytes of a lone surrogate arrive
    as U+FFFD, whatever charset the client names, and the job list still reads."""
    client.force_login(researcher)
    fields = {"project": "nlp/olmo", "cluster": "jupiter", "gpus": "1"}
    fields.update(min_runtime_hours="1", kind="batch", command="true", env="A=1")
    encoded = "&".join(f"{k}={v}" for k, v in fields.items()).encode(charset)
    lone = "\ud800".encode(charset, "surrogatepass")
    name = b"name=" + "x".encode(charset) + b"".join(b"%%%02X" % byte for byte in lone)
    body = name + "&".encode(charset) + encoded
    form = f"application/x-www-form-urlencoded; charset={charset}"
    client.post("/jobs/", body, content_type=form)
    for job in Job.objects.all():
        job.name.encode("utf-8")
    assert client.get("/api/v1/jobs/").status_code == 200
