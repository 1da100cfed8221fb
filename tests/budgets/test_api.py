import datetime as dt

import pytest
from django.utils import timezone

from tests.budgets.factories import UsageEntryFactory

pytestmark = pytest.mark.django_db


def test_the_list_carries_the_contract_fields(client, leader, budget_tree):
    client.force_login(leader)
    rows = {r["path"]: r for r in client.get("/api/v1/budgets/").json()["results"]}
    olmo = rows["nlp/olmo"]
    assert olmo["id"] == budget_tree.olmo.pk
    assert olmo["parent"] == budget_tree.nlp.pk
    assert olmo["grant_gpu_hours"] == 3000
    assert olmo["share"] == pytest.approx(0.6)
    assert olmo["share_of_whole"] == pytest.approx(0.4)
    assert (olmo["used_gpu_hours"], olmo["remaining_gpu_hours"]) == (0, 3000)
    assert olmo["version"] == 1
    assert rows[""]["parent"] is None


def test_a_patch_changes_the_grant_and_the_shares_follow(client, leader, budget_tree):
    client.force_login(leader)
    response = client.patch(
        f"/api/v1/budgets/{budget_tree.tulu.pk}/",
        {"grant_gpu_hours": "3000", "reason": "more evals"},
        content_type="application/json",
    )
    assert response.status_code == 200
    assert response.json()["grant_gpu_hours"] == 3000
    assert response.json()["share"] == pytest.approx(0.5)
    history = client.get(f"/api/v1/budgets/{budget_tree.tulu.pk}/history/").json()
    assert history[0]["actor"] == "leader"
    assert (history[0]["old"], history[0]["new"], history[0]["reason"]) == (
        "2000.00",
        "3000.00",
        "more evals",
    )


def test_a_transfer_answers_with_both_nodes(client, manager, budget_tree):
    client.force_login(manager)
    response = client.post(
        "/api/v1/budgets/transfers/",
        {"source": budget_tree.olmo.pk, "target": budget_tree.tulu.pk, "gpu_hours": "250.5"},
        content_type="application/json",
    )
    body = response.json()
    assert response.status_code == 201
    assert (body["source"]["grant_gpu_hours"], body["target"]["grant_gpu_hours"]) == (
        2749.5,
        2250.5,
    )


def test_token_authentication_reaches_the_budgets(client, researcher, budget_tree):
    token = client.post(
        "/api/v1/auth/token/", {"username": "researcher", "password": "demo"}
    ).json()["token"]
    client.logout()
    response = client.get("/api/v1/budgets/", HTTP_AUTHORIZATION=f"Token {token}")
    assert [r["path"] for r in response.json()["results"]] == ["nlp/olmo"]


def test_put_is_not_offered_only_patch(client, leader, budget_tree):
    client.force_login(leader)
    response = client.put(
        f"/api/v1/budgets/{budget_tree.olmo.pk}/",
        {"grant_gpu_hours": "1"},
        content_type="application/json",
    )
    assert response.status_code == 405


def test_the_openapi_schema_documents_budgets_and_transfers(admin_client, budget_tree):
    schema = admin_client.get("/api/schema/").content.decode()
    assert "/api/v1/budgets/{id}/" in schema
    assert "/api/v1/budgets/transfers/" in schema
    assert "grant_gpu_hours" in schema


def test_the_burn_is_what_was_charged_in_the_last_day_rolled_up(client, manager, budget_tree):
    now = timezone.now()
    UsageEntryFactory(node=budget_tree.olmo, cost_gpu_seconds=2 * 3600)  # an hour ago
    UsageEntryFactory(node=budget_tree.tulu, cost_gpu_seconds=3600 // 2)
    UsageEntryFactory(
        node=budget_tree.olmo,
        cost_gpu_seconds=50 * 3600,
        interval_start=now - dt.timedelta(hours=30),
    )
    client.force_login(manager)
    rows = {row["path"]: row for row in client.get("/api/v1/budgets/").json()["results"]}
    assert rows["nlp/olmo"]["burn_gpu_hours_per_day"] == 2.0
    assert rows["nlp/tulu"]["burn_gpu_hours_per_day"] == 0.5
    assert rows["nlp"]["burn_gpu_hours_per_day"] == 2.5
