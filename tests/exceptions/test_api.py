"""The /api/v1/exceptions/ contract: kind-specific fields, errors naming the field, decisions,
and a list whose query count does not grow with its length."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient


def api(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_extended_protection_round_trip(researcher, cluster_admin, job):
    created = api(researcher).post(
        "/api/v1/exceptions/",
        {
            "kind": "extended_protection",
            "job": job.pk,
            "hours": "12",
            "justification": "deadline",
        },
        format="json",
    )
    assert created.status_code == 201
    body = created.json()
    assert (body["kind"], body["state"], body["job"], body["hours"]) == (
        "extended_protection",
        "submitted",
        job.pk,
        "12.00",
    )
    approved = api(cluster_admin).post(f"/api/v1/exceptions/{body['id']}/approve/")
    assert approved.json()["state"] == "active"
    assert approved.json()["approvals"][0]["approver"] == "cluster_admin"
    explained = api(researcher).get(f"/api/v1/jobs/{job.pk}/explain/").json()
    assert explained["protection_source"] == f"exception #{body['id']}"
    assert explained["protected_until"] == (job.started_at + dt.timedelta(hours=12)).isoformat()


def test_budget_topup_and_reservation_are_created_with_their_fields(
    researcher, budget_tree, cluster
):
    topup = (
        api(researcher)
        .post(
            "/api/v1/exceptions/",
            {
                "kind": "budget_topup",
                "node": budget_tree.olmo.pk,
                "gpu_hours": 250,
                "justification": "rebuttal",
            },
            format="json",
        )
        .json()
    )
    assert (topup["node"], topup["gpu_hours"], topup["program"]) == ("nlp/olmo", "250.00", "nlp")
    start = timezone.now() + dt.timedelta(hours=3)
    reservation = api(researcher).post(
        "/api/v1/exceptions/",
        {
            "kind": "reservation",
            "cluster": "jupiter",
            "gpus": 16,
            "start": start.isoformat(),
            "end": (start + dt.timedelta(hours=8)).isoformat(),
            "justification": "big run",
        },
        format="json",
    )
    assert reservation.status_code == 201
    assert (reservation.json()["cluster"], reservation.json()["gpus"]) == ("jupiter", 16)
    assert reservation.json()["node"] == "nlp/olmo"


@pytest.mark.parametrize(
    "payload,field",
    [
        ({"kind": "extended_protection", "hours": 12}, "job"),
        ({"kind": "extended_protection", "job": "JOB", "hours": 4}, "hours"),
        ({"kind": "extended_protection", "job": "JOB", "hours": 500}, "hours"),
        (
            {"kind": "extended_protection", "job": "JOB", "hours": 12, "justification": ""},
            "justification",
        ),
        ({"kind": "budget_topup", "node": "nlp/olmo", "gpu_hours": -5}, "gpu_hours"),
        ({"kind": "budget_topup", "node": "vision"}, "node"),
        ({"kind": "budget_topup", "gpu_hours": 10}, "node"),
        ({"kind": "reservation", "cluster": "saturn", "gpus": 8}, "cluster"),
        (
            {"kind": "reservation", "cluster": "jupiter", "gpus": 64, "start": "+1", "end": "+2"},
            "gpus",
        ),
        (
            {"kind": "reservation", "cluster": "jupiter", "gpus": 8, "start": "+3", "end": "+2"},
            "end",
        ),
        (
            {"kind": "reservation", "cluster": "jupiter", "gpus": 8, "start": "-3", "end": "+2"},
            "start",
        ),
        ({"kind": "holiday"}, "kind"),
    ],
)
def test_errors_name_the_field(payload, field, researcher, job, cluster):
    payload = {"justification": "why", **payload}
    if payload.get("job") == "JOB":
        payload["job"] = job.pk
    now = timezone.now()
    for key in ("start", "end"):
        if key in payload:
            payload[key] = (now + dt.timedelta(hours=int(payload[key]))).isoformat()
    response = api(researcher).post("/api/v1/exceptions/", payload, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert response.json()["message"]


def test_reject_needs_a_reason_and_records_it(researcher, manager, topup):
    request = topup()
    empty = api(manager).post(f"/api/v1/exceptions/{request.pk}/reject/", {}, format="json")
    assert (empty.status_code, empty.json()["field"]) == (400, "reason")
    done = (
        api(manager)
        .post(f"/api/v1/exceptions/{request.pk}/reject/", {"reason": "wait for Q3"}, format="json")
        .json()
    )
    assert (done["state"], done["reason"], done["decided_by"]) == (
        "rejected",
        "wait for Q3",
        "manager",
    )


def test_deciding_twice_is_refused_naming_the_state(manager, leader, topup):
    request = topup(gpu_hours=100)
    api(manager).post(f"/api/v1/exceptions/{request.pk}/approve/")
    again = api(leader).post(
        f"/api/v1/exceptions/{request.pk}/reject/", {"reason": "no"}, format="json"
    )
    assert (again.status_code, again.json()["field"]) == (400, "state")


def test_withdrawn_requests_can_no_longer_be_approved(researcher, manager, topup):
    request = topup()
    assert (
        api(researcher).post(f"/api/v1/exceptions/{request.pk}/withdraw/").json()["state"]
        == "withdrawn"
    )
    late = api(manager).post(f"/api/v1/exceptions/{request.pk}/approve/")
    assert late.status_code == 400


def test_the_list_runs_a_fixed_number_of_queries(leader, researcher, topup):
    def count():
        fresh = type(leader).objects.get(pk=leader.pk)  # no roles cached from before
        with CaptureQueriesContext(connection) as queries:
            assert api(fresh).get("/api/v1/exceptions/").status_code == 200
        return len(queries)

    topup(gpu_hours=10)
    few = count()
    for _ in range(5):
        topup(gpu_hours=10)
    assert count() == few <= 8


def test_anonymous_callers_are_refused(client):
    assert APIClient().get("/api/v1/exceptions/").status_code in (401, 403)


def test_an_extension_its_budget_cannot_hold_is_refused_by_the_api(
    researcher, cluster_admin, budget_tree, cluster
):
    from budgets import services as budget_services
    from tests.exceptions.conftest import running_job

    budget_services.set_grant(None, budget_tree.olmo, 70)  # 64 GPU-hours held: 6 left
    job = running_job(researcher, budget_tree.olmo, cluster)
    created = api(researcher).post(
        "/api/v1/exceptions/",
        {"kind": "extended_protection", "job": job.pk, "hours": "12", "justification": "x"},
        format="json",
    )
    refused = api(cluster_admin).post(f"/api/v1/exceptions/{created.json()['id']}/approve/")
    assert (refused.status_code, refused.json()["field"]) == (400, "hours")
    assert (
        "nlp/olmo has 6.0 GPU-hours left; this needs 32.0 (26.0 short)" in refused.json()["message"]
    )
    again = api(researcher).get(f"/api/v1/exceptions/{created.json()['id']}/")
    assert again.json()["state"] == "submitted" and again.json()["approvals"] == []
