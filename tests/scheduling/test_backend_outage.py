import datetime as dt

import pytest
import time_machine

from budgets.models import Lien, UsageEntry
from scheduling import dispatch
from scheduling.accounting import charge_running_jobs
from scheduling.backends.base import BackendUnavailable
from scheduling.models import Cluster, Job
from scheduling.reconcile import sync_cluster
from scheduling.services import JobRequest, submit_job
from scheduling.tasks import dispatch_start

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)


def _two_gpus_for_half_an_hour(user, **kw):
    return submit_job(
        user,
        JobRequest(
            name="t", project="nlp/olmo", cluster="jupiter", gpus=2, sim_duration_s=1800, **kw
        ),
    )


def _charged(job) -> int:
    return sum(UsageEntry.objects.filter(job_ref=job.pk).values_list("gpu_seconds", flat=True))


@pytest.fixture
def frozen():
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def test_an_outage_is_recorded_and_a_job_that_finished_meanwhile_is_charged_to_its_real_end(
    researcher, cluster, frozen, run_pass
):
    """The charging task keeps running every minute through a 40-minute outage, as Beat runs
    it; the job ended 30 minutes in. Charging goes no further than the backend last confirmed
    (its last sync), and reconcile charges the rest up to the real end when it learns it."""
    job = _two_gpus_for_half_an_hour(researcher, min_runtime_s=3600)
    run_pass(cluster)
    backend = dispatch.backend_for(cluster)
    frozen.shift(dt.timedelta(seconds=300))
    assert sync_cluster(cluster.pk) is not None  # confirmed running before the outage
    backend.set_outage(True)
    for _ in range(40):  # 40 minutes of outage, charged each minute
        frozen.shift(dt.timedelta(seconds=60))
        charge_running_jobs()
        assert sync_cluster(cluster.pk) is None
    cluster.refresh_from_db()
    job.refresh_from_db()
    assert cluster.reachable is False
    assert "does not answer" in cluster.last_error
    assert job.state == Job.State.RUNNING  # nothing is guessed while the backend is silent
    provisional = UsageEntry.objects.filter(job_ref=job.pk)
    assert sum(e.gpu_seconds for e in provisional) == 2 * 300  # only what was confirmed

    backend.set_outage(False)
    report = sync_cluster(cluster.pk)
    cluster.refresh_from_db()
    job.refresh_from_db()
    assert cluster.reachable is True and cluster.last_error == ""
    assert report.finished == [job.pk]
    assert job.state == Job.State.COMPLETED
    entries = UsageEntry.objects.filter(job_ref=job.pk)
    # Charged to the job's real end, not to when Allot learnt of it after the outage.
    assert sum(e.gpu_seconds for e in entries) == 2 * 1800
    assert sum(e.cost_gpu_seconds for e in entries) == 2 * 1800
    assert all(e.gpu_seconds > 0 for e in entries)  # nothing charged beyond it to give back
    assert job.ended_at == T0 + dt.timedelta(seconds=1800)
    assert not Lien.objects.filter(job_ref=job.pk, released_at__isnull=True).exists()
    charge_running_jobs()  # a late charge after the close changes nothing
    assert (
        sum(UsageEntry.objects.filter(job_ref=job.pk).values_list("gpu_seconds", flat=True)) == 3600
    )


def test_dispatch_during_an_outage_retries_with_backoff(researcher, cluster, monkeypatch):
    assert dispatch_start.autoretry_for == (BackendUnavailable,)
    assert dispatch_start.retry_backoff and dispatch_start.max_retries >= 5
    monkeypatch.setattr(dispatch, "enqueue_starts", lambda jobs: None)
    job = submit_job(
        researcher,
        JobRequest(name="t", project="nlp/olmo", cluster="jupiter", gpus=2, min_runtime_s=3600),
    )
    from scheduling import passes

    passes.run_pass(cluster.pk)
    job.refresh_from_db()
    dispatch.backend_for(Cluster.objects.get(pk=cluster.pk)).set_outage(True)
    with pytest.raises(BackendUnavailable):
        dispatch.start_on_backend(job.pk, job.attempt_key)
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING and not job.dispatched


def test_an_attempt_the_backend_forgot_during_an_outage_counts_only_what_was_confirmed(
    researcher, cluster, frozen, run_pass
):
    """The job finished during a three-hour outage and the backend forgot it an hour later
    (as Slurm forgets finished jobs past MinJobAge): its end is unknown. Allot closes the lost
    attempt where the backend last confirmed it running, for its charges and for the progress
    a resumable job keeps, not at the moment it noticed (which counted a 30-minute job as
    three hours done)."""
    job = _two_gpus_for_half_an_hour(researcher, min_runtime_s=600, resumable=True)
    run_pass(cluster)
    backend = dispatch.backend_for(cluster)
    frozen.shift(dt.timedelta(seconds=300))
    assert sync_cluster(cluster.pk) is not None  # confirmed running 5 minutes in
    backend.set_outage(True)
    frozen.shift(dt.timedelta(hours=3))
    charge_running_jobs()
    backend.set_outage(False)
    report = sync_cluster(cluster.pk)
    job.refresh_from_db()
    assert report.lost == [job.pk]
    assert job.state == Job.State.PENDING  # requeued to finish its work
    assert job.run_seconds_done == 300
    charged = UsageEntry.objects.filter(job_ref=job.pk).values_list("gpu_seconds", flat=True)
    assert sum(charged) == 2 * 300
    assert job.events.get(kind="preempted").at == T0 + dt.timedelta(seconds=300)


def test_a_start_sent_late_and_forgotten_before_any_sync_saw_it_counts_no_progress(
    researcher, cluster, frozen
):
    """Found by the state machine: the pass decided a start during a 5-hour outage; the sync
    that ends it sends the start (the dispatch never ran), and the backend forgets the attempt
    during the next outage before any sync reported it. Closed where the backend last
    confirmed what runs, it counted the 5 hours between decision and dispatch as progress
    (and kept their charges), so its restart ran 1 s of a 2-hour job. The start moves to the
    late dispatch: nothing confirmed ran, nothing is kept."""
    from scheduling import passes

    job = submit_job(
        researcher,
        JobRequest(
            name="t", project="nlp/olmo", cluster="jupiter", gpus=2, sim_duration_s=7200,
            min_runtime_s=600, resumable=True,
        ),
    )  # fmt: skip
    backend = dispatch.backend_for(cluster)
    backend.set_outage(True)
    passes.run_pass(cluster.pk)  # decided at T0; its dispatch task is held back
    frozen.shift(dt.timedelta(hours=5))
    charge_running_jobs()  # never synced: provisionally to now
    backend.set_outage(False)
    assert sync_cluster(cluster.pk).redispatched == [job.pk]
    job.refresh_from_db()
    assert job.started_at == T0 + dt.timedelta(hours=5)  # no earlier than it was sent
    assert _charged(job) == 0
    backend.set_outage(True)
    frozen.shift(dt.timedelta(hours=5))  # it ran its 2 hours; forgotten an hour later
    charge_running_jobs()
    backend.set_outage(False)
    assert sync_cluster(cluster.pk).lost == [job.pk]
    job.refresh_from_db()
    assert job.state == Job.State.PENDING and job.run_seconds_done == 0
    assert _charged(job) == 0
