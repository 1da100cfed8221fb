"""Money at the boundaries: a charge that spans a period's end, and one job's pricing failure
in a charging run that charges every other job."""

import datetime as dt
from decimal import Decimal

import pytest
import time_machine

from budgets import services as budget_services
from budgets.balances import gpu_hours, usage_by_path
from budgets.periods import BudgetPeriod
from scheduling import passes
from scheduling.accounting import charge_running_jobs
from scheduling.models import Job, Node
from scheduling.services import JobRequest, submit_job
from tests.scheduling.conftest import make_cluster

EVE = dt.datetime(2026, 12, 31, 20, 0, tzinfo=dt.UTC)
Q4 = BudgetPeriod.containing(dt.date(2026, 12, 31), "quarter")
Q1 = BudgetPeriod.containing(dt.date(2027, 1, 1), "quarter")


@pytest.fixture
def clock(settings):
    settings.ALLOT_BUDGET_PERIOD = "quarter"
    with time_machine.travel(EVE, tick=False) as traveller:
        yield traveller


def used(node, period) -> Decimal:
    return gpu_hours(usage_by_path(period.start_at, period.end_at).get(node.path, 0))


def start(user, cluster, gpus):
    job = submit_job(
        user,
        JobRequest(
            name="t", project="nlp/olmo", cluster=cluster.name, gpus=gpus, min_runtime_s=3600
        ),
    )
    passes.run_pass(cluster.pk)
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING and job.funded
    return job


def test_a_charge_across_the_period_end_counts_each_part_in_its_own_period(
    researcher, budget_tree, cluster, clock
):
    budget_services.set_grant(None, budget_tree.olmo, 10)
    start(researcher, cluster, gpus=2)
    clock.move_to(EVE + dt.timedelta(hours=2))  # 22:00
    charge_running_jobs()
    assert used(budget_tree.olmo, Q4) == Decimal("4.00")
    clock.move_to(EVE + dt.timedelta(hours=5))  # 01:00 on 1 January: one charge spans midnight
    charge_running_jobs()
    assert used(budget_tree.olmo, Q4) == Decimal("8.00")
    assert used(budget_tree.olmo, Q1) == Decimal("2.00")


def test_the_part_before_the_period_end_is_capped_by_the_old_periods_balance(
    researcher, budget_tree, cluster, clock
):
    budget_services.set_grant(None, budget_tree.olmo, 10)
    job = start(researcher, cluster, gpus=4)
    clock.move_to(EVE + dt.timedelta(hours=2))  # protected hour + one more: 8 GPU-h
    charge_running_jobs()
    clock.move_to(EVE + dt.timedelta(hours=5))  # Q4 has 2 GPU-h left: half an hour at 4 GPUs
    charge_running_jobs()
    assert used(budget_tree.olmo, Q4) == Decimal("10.00")
    assert used(budget_tree.olmo, Q1) == Decimal("0.00")
    job.refresh_from_db()
    assert job.last_charged_at == EVE + dt.timedelta(hours=2, minutes=30)
    passes.run_pass(job.cluster_id)
    job.refresh_from_db()
    assert not job.funded and job.funding_ended_at == EVE + dt.timedelta(hours=2, minutes=30)


def test_an_unpriced_node_type_stops_only_its_own_jobs_charges(
    researcher, budget_tree, cluster, clock, tmp_path
):
    other = make_cluster(tmp_path / "saturn", name="saturn", gpu_type="B200", factor="2.000")
    relabelled = start(researcher, cluster, gpus=2)
    healthy = start(researcher, other, gpus=2)
    # Rediscovery relabels the nodes the first job runs on with a type nobody priced.
    Node.objects.filter(cluster=cluster).update(gpu_type="H100-NVL")
    clock.move_to(EVE + dt.timedelta(hours=1))
    charge_running_jobs()
    healthy.refresh_from_db()
    relabelled.refresh_from_db()
    assert healthy.last_charged_at == EVE + dt.timedelta(hours=1)
    assert relabelled.last_charged_at in (None, relabelled.started_at)
    assert "H100-NVL" in relabelled.last_error
    assert relabelled.events.filter(kind="charge_failed").count() == 1
    clock.move_to(EVE + dt.timedelta(hours=2))
    charge_running_jobs()  # still unpriced: recorded once, the others charged again
    assert relabelled.events.filter(kind="charge_failed").count() == 1
    healthy.refresh_from_db()
    assert healthy.last_charged_at == EVE + dt.timedelta(hours=2)


def test_a_run_on_an_unpriced_node_type_can_still_be_cancelled(
    researcher, budget_tree, cluster, clock
):
    from scheduling.services import cancel_job

    job = start(researcher, cluster, gpus=2)
    Node.objects.filter(cluster=cluster).update(gpu_type="H100-NVL")
    clock.move_to(EVE + dt.timedelta(hours=1))
    cancel_job(researcher, job.pk)
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED
    assert job.funding_ended_at is None
    assert job.events.filter(kind="charge_failed").count() == 1


def test_a_start_on_a_node_relabelled_mid_pass_waits_and_the_others_start(
    researcher, budget_tree, cluster, clock, monkeypatch
):
    from scheduling import passes as pass_module

    jobs = [
        submit_job(
            researcher,
            JobRequest(name="t", project="nlp/olmo", cluster="jupiter", gpus=8, min_runtime_s=600),
        )
        for _ in range(2)
    ]
    decide = pass_module.schedule

    def relabelled_meanwhile(snapshot):
        decisions = decide(snapshot)  # rediscovery relabels a node while the pass decides
        Node.objects.filter(cluster=cluster, name="jupiter-00").update(gpu_type="H100-NVL")
        return decisions

    monkeypatch.setattr(pass_module, "schedule", relabelled_meanwhile)
    passes.run_pass(cluster.pk)
    for job in jobs:
        job.refresh_from_db()
    on_00 = [j for j in jobs if j.state == Job.State.PENDING]
    assert len(on_00) == 1 and "H100-NVL" in on_00[0].pending_message
    assert [j.nodes for j in jobs if j.state == Job.State.RUNNING] == [[["jupiter-01", 8]]]
