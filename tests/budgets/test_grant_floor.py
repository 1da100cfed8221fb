"""A grant cannot be cut below what was spent this period plus what open liens hold: the
running jobs' protected windows were promised against that balance (a balance never goes
below zero beyond open liens). Refused with the field named, in the service, the API and the
page alike; only an accepted change leaves an audit row."""

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from budgets import services
from budgets.balances import balances
from budgets.errors import BudgetValidationError
from budgets.models import AuditEntry
from budgets.periods import BudgetPeriod
from tests.budgets.factories import GpuTypeFactory

pytestmark = pytest.mark.django_db
HOUR = 3600


@pytest.fixture
def olmo_running(budget_tree, researcher):
    """OLMo runs one job: a lien of 1,000 GPU-hours for its protected window, 400 of them
    already charged (the ledger shrinks the lien by as much), so 400 used + 600 held."""
    h100 = GpuTypeFactory(name="H100", cost_factor="1.0")
    services.hold_lien(budget_tree.olmo, job_ref=41, cost_gpu_seconds=1_000 * HOUR)
    end = timezone.now()
    start = end - dt.timedelta(hours=50)
    services.charge_usage(budget_tree.olmo, 41, researcher, h100, start, end, 400 * HOUR)
    stats = balances([budget_tree.olmo])[budget_tree.olmo.pk]
    assert (stats.used_gpu_hours, stats.held_gpu_hours) == (400, 600)
    return budget_tree.olmo


def _grant(node):
    return balances([node])[node.pk].grant_gpu_hours


def test_a_cut_below_what_is_charged_and_held_is_refused_naming_the_minimum(olmo_running, leader):
    before = AuditEntry.objects.count()
    with pytest.raises(BudgetValidationError) as refused:
        services.set_grant(leader, olmo_running, "999.99")
    assert refused.value.field == "grant_gpu_hours"
    assert "used 400.00 GPU-hours" in refused.value.message
    assert "hold 600.00 more" in refused.value.message
    assert "cannot be cut below 1,000.00 GPU-hours" in refused.value.message
    assert _grant(olmo_running) == 3_000
    assert AuditEntry.objects.count() == before


def test_a_cut_down_to_exactly_what_is_committed_is_accepted_and_audited(olmo_running, leader):
    services.set_grant(leader, olmo_running, "1000")
    assert _grant(olmo_running) == 1_000
    assert balances([olmo_running])[olmo_running.pk].remaining_gpu_hours == 0
    entry = AuditEntry.objects.filter(node=olmo_running).latest("pk")
    assert (entry.old, entry.new) == ("3000.00", "1000.00")


def test_a_parent_cannot_be_cut_below_what_its_subtree_has_committed(
    budget_tree, olmo_running, leader
):
    """The whole subtree counts: nlp funds a run of its own (2,500 held) beside OLMo's 1,000
    committed. With Tülu back at 0 its children hold only 3,000, yet nlp cannot go below
    3,500."""
    nlp = budget_tree.nlp
    services.hold_lien(nlp, job_ref=42, cost_gpu_seconds=2_500 * HOUR)
    services.set_grant(leader, budget_tree.tulu, "0")
    with pytest.raises(BudgetValidationError) as refused:
        services.set_grant(leader, nlp, "3400")
    assert "cannot be cut below 3,500.00 GPU-hours" in refused.value.message
    assert "children" not in refused.value.message
    services.set_grant(leader, nlp, "3500")
    assert _grant(nlp) == 3_500


def test_a_parent_still_cannot_be_cut_below_its_childrens_grants(budget_tree, leader):
    with pytest.raises(BudgetValidationError) as refused:
        services.set_grant(leader, budget_tree.nlp, "4999")
    assert "children already hold 5,000" in refused.value.message


def test_raising_or_keeping_a_grant_is_never_refused_for_commitments(olmo_running, leader):
    services.set_grant(leader, olmo_running, "1000")
    services.set_grant(leader, olmo_running, "1000")  # unchanged: accepted, nothing written
    services.set_grant(leader, olmo_running, "1000.01")
    assert _grant(olmo_running) == Decimal("1000.01")
    assert AuditEntry.objects.filter(node=olmo_running, actor=leader).count() == 2


def test_a_released_lien_no_longer_holds_the_grant_up(olmo_running, leader):
    services.release_lien(41)
    services.set_grant(leader, olmo_running, "400")
    assert _grant(olmo_running) == 400


def test_next_periods_grant_may_be_set_below_todays_liens(olmo_running, leader):
    """Liens spend today's balance; next period starts with nothing used or held."""
    following = BudgetPeriod.containing(BudgetPeriod.current().end)
    services.set_grant(leader, olmo_running, "10", period=following)
    assert _grant(olmo_running) == 3_000


def test_a_transfer_cannot_take_away_what_the_source_has_committed(
    budget_tree, olmo_running, manager
):
    tulu = budget_tree.tulu
    with pytest.raises(BudgetValidationError) as refused:
        services.transfer_gpu_hours(manager, olmo_running, tulu, "2000.01")
    assert refused.value.field == "gpu_hours"
    assert "at most 2,000.00 can leave it" in refused.value.message
    services.transfer_gpu_hours(manager, olmo_running, tulu, "2000")
    assert _grant(olmo_running) == 1_000


def test_the_api_refuses_the_cut_with_the_field_and_the_minimum(client, leader, olmo_running):
    client.force_login(leader)
    before = AuditEntry.objects.count()
    response = client.patch(
        f"/api/v1/budgets/{olmo_running.pk}/",
        {"grant_gpu_hours": "500"},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["field"] == "grant_gpu_hours"
    assert "cannot be cut below 1,000.00 GPU-hours" in response.json()["message"]
    assert _grant(olmo_running) == 3_000
    assert AuditEntry.objects.count() == before
    ok = client.patch(
        f"/api/v1/budgets/{olmo_running.pk}/",
        {"grant_gpu_hours": "1000"},
        content_type="application/json",
    )
    assert ok.status_code == 200
    assert ok.json()["remaining_gpu_hours"] == 0
    assert AuditEntry.objects.count() == before + 1


def test_the_api_refuses_a_transfer_below_commitments(budget_tree, client, manager, olmo_running):
    client.force_login(manager)
    tulu = budget_tree.tulu
    response = client.post(
        "/api/v1/budgets/transfers/",
        {"source": olmo_running.pk, "target": tulu.pk, "gpu_hours": "2500"},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["field"] == "gpu_hours"
    assert _grant(olmo_running) == 3_000


def test_the_page_shows_the_refusal_beside_the_grant_and_keeps_it(client, leader, olmo_running):
    client.force_login(leader)
    before = AuditEntry.objects.count()
    response = client.post(f"/budgets/{olmo_running.pk}/grant/", {"grant_gpu_hours": "999"})
    html = response.content.decode()
    assert response.status_code == 400
    row = html[html.index(f'id="node-{olmo_running.pk}"') :]
    row = row[: row.index("</tr>")]
    assert 'aria-invalid="true"' in row
    assert "cannot be cut below 1,000.00 GPU-hours" in row
    assert 'value="999"' in row  # what was typed stays in the field
    assert _grant(olmo_running) == 3_000
    assert AuditEntry.objects.count() == before


def test_the_page_with_htmx_answers_the_fragment_with_the_refusal(client, leader, olmo_running):
    client.force_login(leader)
    response = client.post(
        f"/budgets/{olmo_running.pk}/grant/", {"grant_gpu_hours": "10"}, HTTP_HX_REQUEST="true"
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="budget-tree">')
    assert "cannot be cut below 1,000.00 GPU-hours" in html
    assert _grant(olmo_running) == 3_000


def test_a_project_that_spent_can_be_wound_down_and_archived_in_the_same_period(
    olmo_running, leader
):
    """Its grant goes down to what it used (not to 0: that would take back hours that ran),
    and then it archives."""
    services.release_lien(41)  # its job ended
    with pytest.raises(BudgetValidationError) as refused:
        services.archive_node(leader, olmo_running)
    assert "set its grant to 400.00 (what it has used)" in refused.value.message
    services.set_grant(leader, olmo_running, "400")
    services.archive_node(leader, olmo_running)
    olmo_running.refresh_from_db()
    assert olmo_running.archived
