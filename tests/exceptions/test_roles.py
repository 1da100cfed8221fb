"""Role × action: who may ask for, see, approve, reject and withdraw each kind, through the
API (403 for a visible request one may not act on, 404 outside one's view, 400 naming the
field for a target one cannot see)."""

from collections import namedtuple

import pytest
from rest_framework.test import APIClient

from tests.personas import PEOPLE

Expect = namedtuple(
    "Expect", "ask_protection ask_topup approve_topup decide_protection withdraw sees_topup"
)

# What each persona gets, per action on the researcher's job and requests. decide_protection
# holds for approving and for rejecting alike.
EXPECT = {
    "leader": Expect(403, 201, 200, 200, 403, True),
    "manager": Expect(403, 201, 200, 403, 403, True),
    "other_manager": Expect(400, 400, 404, 404, 404, False),
    "project_lead": Expect(403, 201, 403, 403, 403, True),
    "researcher": Expect(201, 201, 403, 403, 200, True),
    "outsider": Expect(400, 400, 404, 404, 404, False),
    "cluster_admin": Expect(201, 201, 403, 200, 403, True),
}


def client_for(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


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
    assert response.status_code == EXPECT[who].ask_protection, response.json()
    if response.status_code != 201:
        assert response.json()["field"] == "job"


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
    assert response.status_code == EXPECT[who].ask_topup, response.json()


@pytest.mark.parametrize("who", PEOPLE)
def test_who_may_approve_the_researchers_top_up(who, personas, topup):
    request = topup(gpu_hours=100)
    response = client_for(personas[who]).post(f"/api/v1/exceptions/{request.pk}/approve/")
    assert response.status_code == EXPECT[who].approve_topup, response.json()
    request.refresh_from_db()
    assert (request.state == "active") == (EXPECT[who].approve_topup == 200)


@pytest.mark.parametrize("who", PEOPLE)
def test_who_may_approve_protection_of_the_researchers_job(who, personas, protection):
    request = protection()
    response = client_for(personas[who]).post(f"/api/v1/exceptions/{request.pk}/approve/")
    assert response.status_code == EXPECT[who].decide_protection, response.json()


@pytest.mark.parametrize("who", PEOPLE)
def test_who_may_reject_protection_of_the_researchers_job(who, personas, protection):
    request = protection()
    response = client_for(personas[who]).post(
        f"/api/v1/exceptions/{request.pk}/reject/", {"reason": "not this week"}, format="json"
    )
    assert response.status_code == EXPECT[who].decide_protection, response.json()
    request.refresh_from_db()
    assert (request.state == "rejected") == (EXPECT[who].decide_protection == 200)


@pytest.mark.parametrize("who", PEOPLE)
def test_only_the_person_who_asked_may_withdraw(who, personas, topup):
    request = topup()
    response = client_for(personas[who]).post(f"/api/v1/exceptions/{request.pk}/withdraw/")
    assert response.status_code == EXPECT[who].withdraw, response.json()


@pytest.mark.parametrize("who", PEOPLE)
def test_who_sees_the_researchers_top_up(who, personas, topup):
    request = topup()
    client = client_for(personas[who])
    listed = [r["id"] for r in client.get("/api/v1/exceptions/").json()["results"]]
    assert (request.pk in listed) == EXPECT[who].sees_topup
    detail = client.get(f"/api/v1/exceptions/{request.pk}/")
    assert detail.status_code == (200 if EXPECT[who].sees_topup else 404)


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
