"""Role × action: who may ask for, see, approve, reject and withdraw each kind, through the
API (403 for a visible request one may not act on, 404 outside one's view, 400 naming the
field for a target one cannot see)."""

import pytest
from rest_framework.test import APIClient

PEOPLE = [
    "leader",
    "manager",
    "other_manager",
    "project_lead",
    "researcher",
    "outsider",
    "cluster_admin",
]


def client_for(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


REQUEST_PROTECTION = {
    "researcher": 201,
    "cluster_admin": 201,
    "leader": 403,
    "manager": 403,
    "project_lead": 403,
    "other_manager": 400,
    "outsider": 400,
}


@pytest.mark.parametrize("who", PEOPLE)
def test_who_may_ask_to_protect_the_researchers_job(who, personas, job):
    response = client_for(personas[who]).post(
        "/api/v1/exceptions/",
        {
            "kind": "extended_protection",
            "job": job.pk,
            "hours": 12,
            "justification": "deadline",
        },
        format="json",
    )
    assert response.status_code == REQUEST_PROTECTION[who], response.json()
    if response.status_code != 201:
        assert response.json()["field"] == "job"


REQUEST_TOPUP = {
    "researcher": 201,
    "project_lead": 201,
    "manager": 201,
    "leader": 201,
    "cluster_admin": 201,
    "other_manager": 400,
    "outsider": 400,
}


@pytest.mark.parametrize("who", PEOPLE)
def test_who_may_ask_to_top_up_olmo(who, personas, budget_tree):
    response = client_for(personas[who]).post(
        "/api/v1/exceptions/",
        {
            "kind": "budget_topup",
            "node": "nlp/olmo",
            "gpu_hours": 100,
            "justification": "more",
        },
        format="json",
    )
    assert response.status_code == REQUEST_TOPUP[who], response.json()


APPROVE_TOPUP = {
    "manager": 200,
    "leader": 200,
    "project_lead": 403,
    "cluster_admin": 403,
    "researcher": 403,
    "other_manager": 404,
    "outsider": 404,
}


@pytest.mark.parametrize("who", PEOPLE)
def test_who_may_approve_the_researchers_top_up(who, personas, topup):
    request = topup(gpu_hours=100)
    response = client_for(personas[who]).post(f"/api/v1/exceptions/{request.pk}/approve/")
    assert response.status_code == APPROVE_TOPUP[who], response.json()
    request.refresh_from_db()
    assert (request.state == "active") == (APPROVE_TOPUP[who] == 200)


APPROVE_PROTECTION = {
    "cluster_admin": 200,
    "leader": 200,
    "manager": 403,
    "project_lead": 403,
    "researcher": 403,
    "other_manager": 404,
    "outsider": 404,
}


@pytest.mark.parametrize("who", PEOPLE)
def test_who_may_approve_protection_of_the_researchers_job(who, personas, protection):
    request = protection()
    response = client_for(personas[who]).post(f"/api/v1/exceptions/{request.pk}/approve/")
    assert response.status_code == APPROVE_PROTECTION[who], response.json()


@pytest.mark.parametrize("who", PEOPLE)
def test_who_may_reject_protection_of_the_researchers_job(who, personas, protection):
    request = protection()
    response = client_for(personas[who]).post(
        f"/api/v1/exceptions/{request.pk}/reject/", {"reason": "not this week"}, format="json"
    )
    assert response.status_code == APPROVE_PROTECTION[who], response.json()
    request.refresh_from_db()
    assert (request.state == "rejected") == (APPROVE_PROTECTION[who] == 200)


WITHDRAW = {
    "researcher": 200,
    "manager": 403,
    "leader": 403,
    "project_lead": 403,
    "cluster_admin": 403,
    "other_manager": 404,
    "outsider": 404,
}


@pytest.mark.parametrize("who", PEOPLE)
def test_only_the_person_who_asked_may_withdraw(who, personas, topup):
    request = topup()
    response = client_for(personas[who]).post(f"/api/v1/exceptions/{request.pk}/withdraw/")
    assert response.status_code == WITHDRAW[who], response.json()


SEES_TOPUP = {
    "researcher": True,
    "manager": True,
    "leader": True,
    "cluster_admin": True,
    "project_lead": True,
    "other_manager": False,
    "outsider": False,
}


@pytest.mark.parametrize("who", PEOPLE)
def test_who_sees_the_researchers_top_up(who, personas, topup):
    request = topup()
    client = client_for(personas[who])
    listed = [r["id"] for r in client.get("/api/v1/exceptions/").json()["results"]]
    assert (request.pk in listed) == SEES_TOPUP[who]
    detail = client.get(f"/api/v1/exceptions/{request.pk}/")
    assert detail.status_code == (200 if SEES_TOPUP[who] else 404)


def test_a_manager_cannot_approve_their_own_request_even_in_their_program(manager, leader, topup):
    request = topup(who=manager)
    response = client_for(manager).post(f"/api/v1/exceptions/{request.pk}/approve/")
    assert response.status_code == 403
    assert "own request" in response.json()["message"]
    assert client_for(leader).post(f"/api/v1/exceptions/{request.pk}/approve/").status_code == 200


def test_a_manager_asking_for_their_project_is_sent_straight_to_leadership(manager, topup):
    request = topup(who=manager)
    assert request.escalation_level == 1
    assert not request.approvals.exists()
