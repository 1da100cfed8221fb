import pytest
from django.utils import timezone

from budgets import services
from budgets.panels import home_panel
from tests.budgets.factories import UsageEntryFactory

pytestmark = pytest.mark.django_db


def _row(html, node):
    row = html[html.index(f'id="node-{node.pk}"') :]
    return row[: row.index("</tr>")]


def test_the_tree_shows_grant_shares_used_and_remaining(client, leader, budget_tree):
    UsageEntryFactory(node=budget_tree.olmo, cost_gpu_seconds=3600 * 120)
    client.force_login(leader)
    html = client.get("/budgets/").content.decode()
    olmo = _row(html, budget_tree.olmo)
    assert 'value="3000"' in olmo
    assert "60.0 %" in olmo  # of nlp
    assert "40.0 %" in olmo  # of the whole
    assert ">120<" in olmo
    assert ">2,880<" in olmo


def test_saving_a_grant_with_htmx_returns_the_updated_tree_fragment(client, leader, budget_tree):
    client.force_login(leader)
    response = client.post(
        f"/budgets/{budget_tree.tulu.pk}/grant/",
        {"grant_gpu_hours": "3000", "version": "1"},
        HTTP_HX_REQUEST="true",
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<div id="budget-tree">')
    assert "50.0 %" in _row(html, budget_tree.olmo)


def test_a_plain_form_post_saves_and_redirects_back(client, manager, budget_tree):
    client.force_login(manager)
    response = client.post(f"/budgets/{budget_tree.tulu.pk}/grant/", {"grant_gpu_hours": "1500"})
    assert response.status_code == 302
    assert response["Location"] == "/budgets/"
    page = client.get("/budgets/").content.decode()
    assert "Grant of nlp/tulu saved" in page
    assert 'value="1500"' in _row(page, budget_tree.tulu)


def test_a_transfer_from_the_page_moves_hours_between_siblings(client, leader, budget_tree):
    client.force_login(leader)
    response = client.post(
        "/budgets/transfer/",
        {"source": budget_tree.olmo.pk, "target": budget_tree.tulu.pk, "gpu_hours": "500"},
        HTTP_HX_REQUEST="true",
    )
    html = response.content.decode()
    assert 'value="2500"' in _row(html, budget_tree.olmo)
    assert 'value="2500"' in _row(html, budget_tree.tulu)
    assert "Moved 500 GPU-hours" in html


def test_only_editable_grants_get_an_input(client, manager, budget_tree):
    client.force_login(manager)
    html = client.get("/budgets/").content.decode()
    assert "<input" not in _row(html, budget_tree.nlp)
    assert "<input" in _row(html, budget_tree.olmo)


def test_the_node_page_shows_history_and_a_burn_down_chart(client, leader, budget_tree):
    services.set_grant(leader, budget_tree.olmo, 2_000, reason="shift to tulu")
    client.force_login(leader)
    html = client.get(f"/budgets/{budget_tree.olmo.pk}/").content.decode()
    assert "shift to tulu" in html
    assert "3000.00 → 2000.00" in html
    assert '<svg class="burndown"' in html
    assert "No usage charged yet this period" in html


def test_the_burn_down_data_follows_charged_usage(client, leader, budget_tree):
    now = timezone.now()
    UsageEntryFactory(node=budget_tree.olmo, interval_start=now, cost_gpu_seconds=3600 * 30)
    client.force_login(leader)
    data = client.get(f"/budgets/{budget_tree.nlp.pk}/burndown.json").json()
    today = data["points"][-1]
    assert data["grant_gpu_hours"] == "6000.00"
    assert today["date"] == timezone.localdate().isoformat()
    assert (today["used_gpu_hours"], today["remaining_gpu_hours"]) == ("30.00", "5970.00")
    html = client.get(f"/budgets/{budget_tree.nlp.pk}/").content.decode()
    assert 'class="remaining"' in html


def test_a_researchers_home_shows_their_projects_and_balances(client, researcher, budget_tree):
    client.force_login(researcher)
    html = client.get("/").content.decode()
    assert "Your projects" in html
    assert "nlp/olmo" in html
    assert "3,000" in html
    assert "nlp/tulu" not in html


def test_someone_without_a_role_gets_no_budget_panel(outsider, leader):
    assert home_panel(outsider) is None
    assert home_panel(leader)["title"].startswith("Budgets you oversee")
