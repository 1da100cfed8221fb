"""Odd input answers 4xx, never 5xx: ids and numbers parsed once (core.parsing), pagination
capped, NUL bytes refused naming the field, every text field bounded."""

import pytest

from core.parsing import parse_id, parse_int

SUPERSCRIPT = "²"
HUGE = "9" * 5000


@pytest.mark.parametrize(
    "value", ["²", "٣", HUGE, "99999999999999999999", "-1", "0", "", None, "1e3", " ", True]
)
def test_parse_id_refuses_what_is_not_a_database_id(value):
    assert parse_id(value) is None


def test_parse_id_and_parse_int_accept_plain_numbers():
    assert parse_id("42") == 42
    assert parse_id(7) == 7
    assert parse_int("-3") == -3
    assert parse_int("5", minimum=6) is None


def test_a_grant_version_in_superscript_is_ignored_not_a_crash(client, leader, budget_tree):
    client.force_login(leader)
    for version in (SUPERSCRIPT, HUGE):
        response = client.post(
            f"/budgets/{budget_tree.olmo.pk}/grant/",
            {"grant_gpu_hours": "3000", "version": version},
        )
        assert response.status_code < 500


def test_exception_decisions_on_odd_ids_are_404(client, leader):
    client.force_login(leader)
    for pk in (SUPERSCRIPT, "99999999999999999999"):
        response = client.post(f"/api/v1/exceptions/{pk}/approve/", {}, "application/json")
        assert response.status_code == 404


@pytest.mark.parametrize("node", [SUPERSCRIPT, HUGE, "99999999999999999999"])
def test_a_topup_for_an_odd_node_names_the_node(client, researcher, node):
    client.force_login(researcher)
    response = client.post(
        "/api/v1/exceptions/",
        {"kind": "budget_topup", "node": node, "gpu_hours": "10", "justification": "x"},
        "application/json",
    )
    assert response.status_code == 400
    assert response.json()["field"] == "node"


@pytest.mark.parametrize("cluster", [SUPERSCRIPT, HUGE])
def test_a_reservation_on_an_odd_cluster_names_the_cluster(client, researcher, jupiter, cluster):
    client.force_login(researcher)
    response = client.post(
        "/api/v1/exceptions/",
        {
            "kind": "reservation",
            "cluster": cluster,
            "gpus": 8,
            "start": "2030-01-01T00:00:00Z",
            "end": "2030-01-01T02:00:00Z",
            "justification": "x",
        },
        "application/json",
    )
    assert response.status_code == 400
    assert response.json()["field"] == "cluster"


def test_the_reservation_page_for_an_odd_cluster_is_404(client, researcher, jupiter):
    client.force_login(researcher)
    response = client.get(f"/exceptions/new/reservation/{SUPERSCRIPT}/")
    assert response.status_code == 404


@pytest.mark.parametrize("path", ["/api/v1/jobs/", "/api/v1/exceptions/", "/api/v1/budgets/"])
def test_pagination_survives_huge_offsets_and_caps_the_limit(client, leader, path):
    client.force_login(leader)
    assert client.get(path, {"offset": "99999999999999999999"}).status_code == 200
    assert client.get(path, {"offset": HUGE, "limit": SUPERSCRIPT}).status_code == 200
    from portal.api import Pagination

    assert Pagination.max_limit == 500
    capped = client.get("/api/v1/jobs/", {"limit": "100000"})
    assert capped.status_code == 200


def test_pagination_never_returns_more_than_the_cap(client, researcher, researchers_job):
    from scheduling.models import Job

    Job.objects.bulk_create(
        [
            Job(
                name=f"j{i}",
                owner=researcher,
                cluster=researchers_job.cluster,
                gpus=1,
                min_runtime_s=3600,
                submitted_at=researchers_job.submitted_at,
            )
            for i in range(505)
        ]
    )
    client.force_login(researcher)
    body = client.get("/api/v1/jobs/", {"limit": "100000"}).json()
    assert len(body["results"]) == 500


def test_nul_bytes_in_the_structure_forms_are_refused_naming_the_field(client, leader, budget_tree):
    client.force_login(leader)
    response = client.post(
        f"/budgets/{budget_tree.olmo.pk}/rename/", {"name": "OL\x00Mo", "slug": "olmo"}
    )
    assert response.status_code == 400
    assert b"name" in response.content
    budget_tree.olmo.refresh_from_db()
    assert budget_tree.olmo.name == "OLMo"


def test_nul_bytes_in_the_api_are_refused_naming_the_field(client, researcher):
    client.force_login(researcher)
    response = client.get("/api/v1/jobs/", {"state": "run\x00ning"})
    assert response.status_code == 400
    assert response.json()["field"] == "state"
    posted = client.post("/api/v1/auth/token/", {"username": "a\x00", "password": "x"})
    assert posted.status_code == 400
    assert posted.json()["field"] == "username"


def test_a_token_with_odd_characters_is_a_401(client, db):
    response = client.get("/api/v1/jobs/", HTTP_AUTHORIZATION="Token abc\x00def")
    assert response.status_code == 401


@pytest.mark.parametrize(
    ("url", "field", "data"),
    [
        ("rename", "name", {"name": "n" * 500, "slug": "olmo"}),
        ("rename", "slug", {"name": "OLMo", "slug": "s" * 500}),
        ("rename", "reason", {"name": "OLMo", "slug": "olmo", "reason": "r" * 10_000}),
        ("children", "name", {"name": "n" * 500, "slug": "kid", "grant_gpu_hours": "1"}),
        ("weight", "reason", {"weight": "1", "reason": "r" * 10_000}),
    ],
)
def test_structure_forms_bound_every_field(client, leader, budget_tree, url, field, data):
    client.force_login(leader)
    response = client.post(f"/budgets/{budget_tree.olmo.pk}/{url}/", data)
    assert response.status_code == 400
    assert field.encode() in response.content


def test_the_grant_and_transfer_forms_bound_the_reason(client, leader, budget_tree):
    client.force_login(leader)
    long = "r" * 10_000
    grant = client.post(
        f"/budgets/{budget_tree.olmo.pk}/grant/", {"grant_gpu_hours": "2900", "reason": long}
    )
    assert grant.status_code == 400
    moved = client.post(
        "/budgets/transfer/",
        {
            "source": budget_tree.olmo.pk,
            "target": budget_tree.tulu.pk,
            "gpu_hours": "1",
            "reason": long,
        },
    )
    assert moved.status_code == 400


def test_the_submit_form_bounds_the_command(client, researcher, jupiter):
    client.force_login(researcher)
    response = client.post(
        "/jobs/",
        {
            "name": "big",
            "project": "",
            "cluster": "jupiter",
            "gpus": "1",
            "min_runtime_hours": "1",
            "kind": "batch",
            "command": "x" * 20_000,
        },
    )
    assert response.status_code == 400
    from scheduling.models import Job

    assert not Job.objects.filter(name="big").exists()


def test_the_job_api_bounds_the_project(client, researcher, jupiter):
    client.force_login(researcher)
    response = client.post(
        "/api/v1/jobs/",
        {
            "name": "x",
            "project": "p" * 5000,
            "cluster": "jupiter",
            "gpus": 1,
            "min_runtime_s": 3600,
        },
        "application/json",
    )
    assert response.status_code == 400
    assert response.json()["field"] == "project"


def test_the_login_form_bounds_the_password_before_hashing_it(client, researcher):
    from unittest import mock

    with mock.patch("django.contrib.auth.backends.ModelBackend.authenticate") as backend:
        response = client.post("/login/", {"username": "researcher", "password": "p" * 100_000})
    assert response.status_code == 200
    assert not backend.called
    assert "_auth_user_id" not in client.session


def test_a_new_child_with_a_zero_grant_is_created_not_a_crash(client, leader, budget_tree):
    client.force_login(leader)
    page = client.post(
        f"/budgets/{budget_tree.olmo.pk}/children/",
        {"name": "Zero", "slug": "zero", "grant_gpu_hours": "0"},
    )
    assert page.status_code == 302
    api = client.post(
        "/api/v1/budgets/",
        {"parent": budget_tree.tulu.pk, "name": "None yet", "grant_gpu_hours": 0},
        "application/json",
    )
    assert api.status_code == 201
