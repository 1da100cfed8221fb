"""What crosses a period's end: a temporary top-up ends with its period even while a run it
funded still holds a lien, and an extended protection ends with its exception even when its
job lost its funding meanwhile."""

import datetime as dt
from decimal import Decimal

import pytest
import time_machine

from budgets import services as budget_services
from budgets.balances import remaining_by_path, with_grants
from budgets.models import BudgetNode, Lien
from budgets.periods import BudgetPeriod
from exceptions import services
from exceptions.tasks import housekeeping
from scheduling import accounting
from scheduling.models import Job
from tests.exceptions.conftest import running_job

EVE = dt.datetime(2026, 12, 31, 20, 0, tzinfo=dt.UTC)
Q1 = BudgetPeriod.containing(dt.date(2027, 1, 1), "quarter")


@pytest.fixture(autouse=True)
def quarters(settings):
    settings.ALLOT_BUDGET_PERIOD = "quarter"


def grant(node, period) -> Decimal:
    row = with_grants(BudgetNode.objects.filter(pk=node.pk), period).get()
    return Decimal(row.grant_in_force)


def test_a_top_up_is_not_carried_into_the_next_period_by_a_lien_still_open_at_its_end(
    researcher, manager, budget_tree, cluster
):
    with time_machine.travel(EVE, tick=False):
        budget_services.set_grant(None, budget_tree.olmo, 10)
        request = services.request_exception(
            researcher,
            "budget_topup",
            node=budget_tree.olmo.pk,
            gpu_hours=Decimal(100),
            justification="The year-end run.",
        )
        services.approve_exception(manager, request.pk)
        job = running_job(researcher, budget_tree.olmo, cluster, hours_ago=0, min_runtime_h=8)
        assert Lien.objects.get(job_ref=job.pk).cost_gpu_seconds == 8 * 8 * 3600
    with time_machine.travel(Q1.start_at + dt.timedelta(minutes=1), tick=False):
        accounting.charge_running_jobs()
        assert housekeeping()["expired"] == 1
        request.refresh_from_db()
        assert grant(budget_tree.olmo, Q1) == Decimal("10")
        # The run keeps its protection; its lien spends the new period's grant, which it
        # exceeds: the project starts the period owing the difference, and the note says so.
        left = remaining_by_path()[budget_tree.olmo.path]
        assert left < 0
        notes = " ".join(request.events.filter(kind="effect").values_list("message", flat=True))
        assert "10.00 GPU-hours" in notes and "no new start" in notes
    job.refresh_from_db()
    assert job.funded and job.protected_until == EVE + dt.timedelta(hours=8)


def test_an_extended_protection_ends_with_its_exception_after_the_job_was_defunded(
    researcher, cluster_admin, budget_tree, cluster
):
    job = running_job(researcher, budget_tree.olmo, cluster, min_runtime_h=1)
    request = services.request_exception(
        researcher, "extended_protection", job=job.pk, hours=12, justification="Deadline."
    )
    services.approve_exception(cluster_admin, request.pk)
    job.refresh_from_db()
    assert job.max_protection_s == 12 * 3600
    locked = Job.objects.select_related("project", "owner", "cluster").get(pk=job.pk)
    accounting.defund(locked, job.started_at + dt.timedelta(hours=1), budget_tree.olmo.slug_path)
    Job.objects.filter(pk=job.pk).update(state=Job.State.COMPLETED)
    assert housekeeping()["expired"] == 1
    job.refresh_from_db()
    assert job.max_protection_s is None
