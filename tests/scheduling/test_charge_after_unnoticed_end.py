"""A job's end is noticed late (the worker was down, the sync lagged): periodic charging must
not have charged it past its real end in the meantime. Found by the fault-injection suite."""

import datetime as dt

import time_machine

import scheduling.tasks  # noqa: F401 - registers the tasks the eager dispatch runs by name
from budgets.models import UsageEntry
from scheduling.accounting import charge_running_jobs
from scheduling.models import Job
from scheduling.reconcile import sync_cluster
from scheduling.services import JobRequest, submit_job

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)


def test_a_job_whose_end_is_noticed_late_is_charged_to_its_real_end(researcher, cluster, run_pass):
    with time_machine.travel(T0, tick=False) as clock:
        job = submit_job(
            researcher,
            JobRequest(
                name="short", project="nlp/olmo", cluster="jupiter", gpus=4,
                min_runtime_s=3600, sim_duration_s=20,
            ),
        )  # fmt: skip
        run_pass(cluster)
        clock.shift(dt.timedelta(seconds=10))
        sync_cluster(cluster.pk)  # the backend still runs it
        clock.shift(dt.timedelta(seconds=20))  # it ended at T0 + 20 s; nobody has looked since
        charge_running_jobs()
        clock.shift(dt.timedelta(seconds=1))
        sync_cluster(cluster.pk)  # now the end is noticed

    job.refresh_from_db()
    assert job.state == Job.State.COMPLETED
    assert job.ended_at == T0 + dt.timedelta(seconds=20)
    entries = UsageEntry.objects.filter(job_ref=job.pk)
    assert sum(e.gpu_seconds for e in entries) == 4 * 20
    assert max(e.interval_end for e in entries) == job.ended_at


def test_an_end_reported_in_whole_seconds_is_never_before_what_was_charged(
    researcher, cluster, run_pass
):
    """Slurm reports end times in whole seconds. A job seen running at 06.5 and then reported
    ended at 06 ran past 06.5: its recorded end must not fall before what was charged."""
    from scheduling import dispatch
    from scheduling.backends.base import RemoteJob, RemoteState
    from scheduling.reconcile import reconcile_cluster

    start = T0 + dt.timedelta(milliseconds=400)
    with time_machine.travel(start, tick=False) as clock:
        job = submit_job(
            researcher,
            JobRequest(
                name="short", project="nlp/olmo", cluster="jupiter", gpus=2,
                min_runtime_s=3600, sim_duration_s=7200,
            ),
        )  # fmt: skip
        run_pass(cluster)
        clock.shift(dt.timedelta(milliseconds=6100))  # 09:00:06.5
        sync_cluster(cluster.pk)  # still running
        charge_running_jobs()  # charged to 09:00:06.4, whole seconds from the start
        job.refresh_from_db()
        ended = RemoteJob(
            job.pk, job.external_id, job.attempt_key, RemoteState.COMPLETED,
            exit_code=0, ended_at=(T0 + dt.timedelta(seconds=6)).timestamp(),
        )  # fmt: skip
        reconcile_cluster(cluster, [ended], dispatch.backend_for(cluster))

    job.refresh_from_db()
    assert job.state == Job.State.COMPLETED
    assert job.ended_at >= job.last_charged_at
    charged = sum(e.gpu_seconds for e in UsageEntry.objects.filter(job_ref=job.pk))
    assert charged == job.gpus * int((job.ended_at - job.started_at).total_seconds())
