"""A floor under every budget, and locks where money moves, driven through the live loop:
submit, pass, charge, reconcile, in the interleavings the workers produce."""

import datetime as dt

import pytest
import time_machine

from budgets import services as budget_services
from budgets.balances import remaining_by_path
from budgets.models import Lien, UsageEntry
from scheduling import passes
from scheduling.accounting import charge_running_jobs
from scheduling.apply import apply_decisions
from scheduling.engine import schedule
from scheduling.explain import explain_job
from scheduling.models import Cluster, Job
from scheduling.services import JobRequest, set_node_drain, submit_job
from scheduling.snapshot import build_snapshot
from tests.scheduling.conftest import make_cluster

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)


@pytest.fixture
def clock():
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def submit(user, project="nlp/olmo", cluster="jupiter", gpus=2, min_runtime_s=3600, **kw):
    return submit_job(
        user,
        JobRequest(
            name="t",
            project=project,
            cluster=cluster,
            gpus=gpus,
            min_runtime_s=min_runtime_s,
            **kw,
        ),
    )


def charged(job) -> int:
    return sum(UsageEntry.objects.filter(job_ref=job.pk).values_list("gpu_seconds", flat=True))


def remaining(node) -> int:
    return remaining_by_path()[node.path]


def test_after_its_protection_a_run_stops_being_charged_when_the_budget_reaches_zero(
    researcher, budget_tree, cluster, clock
):
    budget_services.set_grant(None, budget_tree.olmo, 3)  # 3 GPU-hours: 1.5 h at 2 GPUs
    job = submit(researcher)
    passes.run_pass(cluster.pk)
    job.refresh_from_db()
    assert job.funded and job.protected_until == T0 + dt.timedelta(hours=1)
    for _ in range(24):  # two hours, charged every five minutes
        clock.shift(dt.timedelta(minutes=5))
        charge_running_jobs()
        assert remaining(budget_tree.olmo) >= 0
    assert charged(job) == 2 * 5400  # the lien's hour, then half an hour until zero
    passes.run_pass(cluster.pk)
    job.refresh_from_db()
    ran_out = T0 + dt.timedelta(minutes=90)
    assert (job.state, job.funded, job.funding_ended_at) == ("running", False, ran_out)
    assert job.events.filter(kind="unfunded", message__contains="funding ran out at").exists()
    assert not Lien.objects.filter(job_ref=job.pk, released_at__isnull=True).exists()
    why = explain_job(job)
    assert why["funded"] is False and why["protected"] is False
    assert "Funding ran out at 2026-11-02 10:30:00" in why["funding_note"]
    assert "Any funded job" in why["preemptible_by"]
    clock.shift(dt.timedelta(hours=1))
    charge_running_jobs()
    assert charged(job) == 2 * 5400  # unallocated: free


def test_a_run_out_of_funds_is_preempted_by_anyone(researcher, manager, budget_tree, tmp_path):
    with time_machine.travel(T0, tick=False) as clock:
        cluster = make_cluster(tmp_path, nodes=1)
        budget_services.set_grant(None, budget_tree.olmo, 3)
        job = submit(researcher, gpus=8, min_runtime_s=600)
        passes.run_pass(cluster.pk)
        clock.shift(dt.timedelta(hours=1))
        charge_running_jobs()
        passes.run_pass(cluster.pk)
        job.refresh_from_db()
        assert not job.funded
        # tulu ranks no better than olmo by standing, yet may take the GPUs of an unfunded run.
        other = submit(manager, project="nlp/tulu", gpus=8)
        passes.run_pass(cluster.pk)
        job.refresh_from_db()
        other.refresh_from_db()
        assert job.state == Job.State.PREEMPTED and other.state == Job.State.RUNNING


def test_funding_checks_every_ancestor_not_only_the_project(
    researcher, manager, budget_tree, cluster, clock
):
    """olmo spent 2 of its 4 GPU-hours as a project, then got a sub-project of 3 (children
    are held to their parent's grant, not to what it has left): the sub-project's own
    balance (3) would cover a 3 GPU-hour lien, olmo's (2) does not.

    (This used to cut tulu's grant below what it had spent; such a cut is now refused, so the
    test reaches a short ancestor the way the services still allow.)"""
    from scheduling.services import cancel_job

    budget_services.set_grant(None, budget_tree.olmo, 4)
    first = submit(researcher, project="nlp/olmo", gpus=2, min_runtime_s=3600)
    passes.run_pass(cluster.pk)
    clock.shift(dt.timedelta(hours=1))
    cancel_job(researcher, first.pk)
    assert charged(first) == 2 * 3600
    ablations = budget_services.create_node(None, budget_tree.olmo, "Ablations", "ablations")
    budget_services.set_grant(None, ablations, 3)
    assert remaining(ablations) == 3 * 3600 and remaining(budget_tree.olmo) == 2 * 3600

    later = submit(researcher, project="nlp/olmo/ablations", gpus=3, min_runtime_s=3600)
    passes.run_pass(cluster.pk)
    later.refresh_from_db()
    assert later.state == Job.State.RUNNING and not later.funded
    assert not Lien.objects.filter(job_ref=later.pk).exists()


def test_a_lien_that_fails_at_start_leaves_the_job_unstarted_and_preempts_nobody(
    researcher, budget_tree, tmp_path, clock
):
    """Two clusters' passes spend one project's last hours: the second, planned on a snapshot
    taken before the first committed, must not start its job funded nor preempt for it."""
    east = make_cluster(tmp_path / "e", name="east", nodes=1)
    west = make_cluster(tmp_path / "w", name="west", nodes=1)
    budget_services.set_grant(None, budget_tree.olmo, 8)  # one 8-GPU hour
    squatter = submit(researcher, project="", cluster="west", gpus=8)
    passes.run_pass(west.pk)
    squatter.refresh_from_db()
    assert squatter.state == Job.State.RUNNING and not squatter.funded
    a = submit(researcher, cluster="east", gpus=8)
    b = submit(researcher, cluster="west", gpus=8)

    ctx = build_snapshot(Cluster.objects.get(pk=west.pk))  # west plans while east runs
    decisions = schedule(ctx.snapshot)
    assert [s.job_id for s in decisions.starts] == [str(b.pk)]
    assert [p.job_id for p in decisions.preemptions] == [str(squatter.pk)]
    passes.run_pass(east.pk)  # east commits first and spends the balance
    apply_decisions(ctx, decisions, T0, Cluster.objects.get(pk=west.pk))

    a.refresh_from_db()
    b.refresh_from_db()
    squatter.refresh_from_db()
    assert a.state == Job.State.RUNNING and a.funded
    assert b.state == Job.State.PENDING and b.protected_until is None
    assert b.pending_code == "Unfunded"
    assert squatter.state == Job.State.RUNNING  # nobody preempted on its behalf
    assert Lien.objects.filter(released_at__isnull=True).count() == 1


def test_a_preemption_charges_every_second_even_after_a_charge_ran_since_the_snapshot(
    researcher, cluster_admin, budget_tree, cluster, clock
):
    job = submit(researcher, gpus=8, min_runtime_s=600)
    passes.run_pass(cluster.pk)
    job.refresh_from_db()
    node = job.nodes[0][0]
    clock.shift(dt.timedelta(minutes=20))
    set_node_drain(cluster_admin, cluster.nodes.get(name=node).pk, True, "repair")
    ctx = build_snapshot(Cluster.objects.get(pk=cluster.pk))  # the pass reads the job ...
    decisions = schedule(ctx.snapshot)
    assert [p.job_id for p in decisions.preemptions] == [str(job.pk)]
    clock.shift(dt.timedelta(seconds=30))
    charge_running_jobs()  # ... the charging task advances last_charged_at meanwhile ...
    clock.shift(dt.timedelta(seconds=30))
    apply_decisions(ctx, decisions, T0 + dt.timedelta(minutes=21), cluster)  # ... then it applies
    job.refresh_from_db()
    assert job.state == Job.State.PREEMPTED
    assert charged(job) == 8 * 21 * 60  # no second skipped, none twice


def test_an_extended_protection_granted_mid_run_cannot_take_a_budget_below_zero(
    researcher, cluster_admin, cluster, budget_tree, clock, run_pass
):
    from exceptions import services as exception_services
    from exceptions.errors import ExceptionError
    from scheduling.reconcile import sync_cluster

    budget_services.set_grant(None, budget_tree.olmo, 20)
    job = submit(researcher, gpus=2, min_runtime_s=600, sim_duration_s=20 * 3600)
    run_pass(cluster)
    request = exception_services.request_exception(
        researcher, "extended_protection", job=job, hours="12", justification="long eval"
    )
    try:
        exception_services.approve_exception(cluster_admin, request.pk)
    except ExceptionError:
        pass  # refusing what the budget cannot cover keeps the promise too
    for _ in range(12 * 6):  # twelve hours, charged and synced every ten minutes
        clock.shift(dt.timedelta(minutes=10))
        sync_cluster(cluster.pk)
        charge_running_jobs()
        run_pass(cluster)
    assert remaining(budget_tree.olmo) >= 0


def test_an_extended_protection_the_budget_covers_is_held_and_charged_to_the_hour(
    researcher, cluster_admin, cluster, budget_tree, clock, run_pass
):
    from exceptions import services as exception_services

    budget_services.set_grant(None, budget_tree.olmo, 30)
    job = submit(researcher, gpus=2, min_runtime_s=600, sim_duration_s=20 * 3600)
    run_pass(cluster)
    clock.shift(dt.timedelta(hours=1))  # past its own 10 minutes: charged under the floor
    charge_running_jobs()
    request = exception_services.request_exception(
        researcher, "extended_protection", job=job, hours="12", justification="long eval"
    )
    exception_services.approve_exception(cluster_admin, request.pk)
    job.refresh_from_db()
    assert job.protected_until == T0 + dt.timedelta(hours=12)
    lien = Lien.objects.get(job_ref=job.pk, released_at__isnull=True)
    assert lien.cost_gpu_seconds - lien.charged_gpu_seconds == 2 * 11 * 3600  # hours 1 to 12
    assert remaining(budget_tree.olmo) == (30 - 2 - 22) * 3600
    for _ in range(11):
        clock.shift(dt.timedelta(hours=1))
        charge_running_jobs()
        assert remaining(budget_tree.olmo) == (30 - 2 - 22) * 3600  # the lien pays
    assert charged(job) == 2 * 12 * 3600


def test_the_floor_is_exact_on_a_fractional_price(researcher, budget_tree, tmp_path, clock):
    """4 GPUs at 1.8 cost 7.2 a second. A floor that divides the balance by a per-second cost
    rounded to 7 lets the run go 11 s (79 cost-seconds) past zero: it must stop where the
    balance is spent, to the second."""
    b200 = make_cluster(tmp_path, name="b200", nodes=1, gpu_type="B200", factor="1.800")
    budget_services.set_grant(None, budget_tree.olmo, 2)  # 7,200: the lien's 4,320, then 400 s
    job = submit(researcher, cluster="b200", gpus=4, min_runtime_s=600)
    passes.run_pass(b200.pk)
    clock.shift(dt.timedelta(minutes=30))
    charge_running_jobs()
    job.refresh_from_db()
    assert job.last_charged_at == T0 + dt.timedelta(seconds=600 + 400)
    assert charged(job) == 4 * 1000
    assert remaining(budget_tree.olmo) == 0
