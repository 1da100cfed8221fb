"""``manage.py reconcile_ledger`` compares what Allot charged per attempt with the simulated
backend's own record: exit 0 when they agree, 1 with each difference printed."""

import datetime as dt

import pytest
import time_machine
from django.core.management import call_command

from budgets import ledger
from budgets.models import GpuType
from scheduling import passes, reconcile
from scheduling.accounting import charge_running_jobs
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)


def run_to_completion(user, cluster, committed):
    with time_machine.travel(T0, tick=False) as clock:
        job = submit_job(
            user,
            JobRequest(
                name="t",
                project="nlp/olmo",
                cluster=cluster.name,
                gpus=2,
                min_runtime_s=600,
                sim_duration_s=1800,
            ),
        )
        with committed():
            passes.run_pass(cluster.pk)
        reconcile.sync_cluster(cluster.pk)
        clock.shift(dt.timedelta(minutes=20))
        reconcile.sync_cluster(cluster.pk)
        charge_running_jobs()
        clock.shift(dt.timedelta(minutes=20))  # it ended at 30 minutes
        reconcile.sync_cluster(cluster.pk)
    job.refresh_from_db()
    assert job.state == Job.State.COMPLETED
    return job


def test_charges_that_match_the_backends_record_exit_zero(
    researcher, budget_tree, cluster, committed, capsys
):
    run_to_completion(researcher, cluster, committed)
    with time_machine.travel(T0 + dt.timedelta(minutes=45), tick=False):
        call_command("reconcile_ledger", "--cluster", cluster.name)
    assert "no difference" in capsys.readouterr().out


def test_a_charge_the_backend_does_not_account_for_is_printed_and_exits_one(
    researcher, budget_tree, cluster, committed, capsys
):
    job = run_to_completion(researcher, cluster, committed)
    extra = T0 + dt.timedelta(minutes=31)  # a charge after the real end
    ledger.charge_usage(
        job.project, job.pk, job.owner, GpuType.objects.get(name="H100"), extra,
        extra + dt.timedelta(minutes=10), 2 * 600,
    )  # fmt: skip
    with time_machine.travel(T0 + dt.timedelta(minutes=45), tick=False):
        with pytest.raises(SystemExit) as exited:
            call_command("reconcile_ledger", "--since", "2026-11-02T08:00:00+00:00")
    assert exited.value.code == 1
    out = capsys.readouterr().out
    assert f"job {job.pk}" in out and "+0.33" in out
