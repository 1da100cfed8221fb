import datetime as dt

import pytest
import time_machine
from django.utils import timezone

from budgets.models import Lien, UsageEntry
from scheduling import dispatch, passes
from scheduling.backends.base import RemoteState
from scheduling.models import Job
from scheduling.reconcile import sync_cluster
from scheduling.services import JobRequest, cancel_job, submit_job

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)


def submit(user, gpus=8, project="nlp/olmo", name="train", min_runtime_s=3600, **kw):
    return submit_job(
        user,
        JobRequest(
            name=name,
            project=project,
            cluster="jupiter",
            gpus=gpus,
            min_runtime_s=min_runtime_s,
            sim_duration_s=7200,
            **kw,
        ),
    )


def remote_jobs(cluster):
    return dispatch.backend_for(cluster).sync()


@pytest.fixture
def frozen():
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def test_a_pass_starts_a_funded_job_holds_its_lien_and_dispatches_it(
    researcher, cluster, frozen, run_pass
):
    job = submit(researcher)
    result = run_pass(cluster)
    job.refresh_from_db()
    assert result.ran and result.started == 1
    assert job.state == Job.State.RUNNING
    assert job.funded
    assert job.protected_until == T0 + dt.timedelta(hours=1)
    assert len(job.nodes) == 1 and job.nodes[0][1] == 8
    lien = Lien.objects.get(job_ref=job.pk)
    assert lien.cost_gpu_seconds == 8 * 3600
    assert job.dispatched and job.external_id
    [remote] = remote_jobs(cluster)
    assert remote.attempt_key == job.attempt_key
    assert remote.nodes == (job.nodes[0][0],)


def test_a_waiting_job_gets_a_reason_a_position_and_an_estimated_start(
    researcher, cluster, frozen, run_pass
):
    submit(researcher, gpus=16, name="big")
    run_pass(cluster)
    waiting = submit(researcher, gpus=8, name="small")
    run_pass(cluster)
    waiting.refresh_from_db()
    assert waiting.state == Job.State.PENDING
    assert waiting.pending_code == "Resources"
    assert waiting.pending_message
    assert waiting.queue_position == 1
    # "big" is of its own project: it need not yield when its protection ends, so that is no
    # start time to promise (estimates never assume forbidden preemptions).
    assert waiting.estimated_start is None
    assert "waits for jobs of nlp/olmo to finish" in waiting.pending_message


def test_two_passes_at_once_only_one_runs(cluster, run_pass):
    token = passes.acquire_lock(cluster.pk)
    assert token
    assert run_pass(cluster).ran is False
    passes.release_lock(cluster.pk, token)
    assert run_pass(cluster).ran is True


def test_an_expired_lock_from_a_dead_worker_does_not_block_forever(cluster, frozen, run_pass):
    assert passes.acquire_lock(cluster.pk, ttl=dt.timedelta(seconds=30))
    frozen.shift(dt.timedelta(seconds=31))
    assert run_pass(cluster).ran is True


def test_a_worker_dying_between_commit_and_dispatch_is_repaired_without_a_duplicate(
    researcher, cluster, frozen, monkeypatch, run_pass
):
    monkeypatch.setattr(dispatch, "enqueue_starts", lambda jobs: None)  # the crash
    job = submit(researcher)
    run_pass(cluster)
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING and not job.dispatched
    assert remote_jobs(cluster) == []

    report = sync_cluster(cluster.pk)
    assert report.redispatched == [job.pk]
    report = sync_cluster(cluster.pk)
    assert report.redispatched == []
    assert [r.attempt_key for r in remote_jobs(cluster)] == [job.attempt_key]
    # A dispatch retried after the repair still launches nothing new.
    assert dispatch.start_on_backend(job.pk, job.attempt_key)
    assert len(remote_jobs(cluster)) == 1


def test_accounting_charges_funded_occupancy_times_cost_to_the_second(
    researcher, cluster, frozen, run_pass
):
    from scheduling.accounting import charge_running_jobs

    job = submit(researcher, gpus=4)
    run_pass(cluster)
    frozen.shift(dt.timedelta(seconds=1234))
    assert charge_running_jobs() == 4 * 1234
    assert charge_running_jobs() == 0  # charging again at the same instant adds nothing
    frozen.shift(dt.timedelta(seconds=66))
    charge_running_jobs()
    entries = UsageEntry.objects.filter(job_ref=job.pk)
    assert sum(e.gpu_seconds for e in entries) == 4 * 1300
    assert sum(e.cost_gpu_seconds for e in entries) == 4 * 1300


def test_b200_hours_cost_more(researcher, db, tmp_path, frozen, run_pass):
    from scheduling.accounting import charge_running_jobs
    from tests.scheduling.conftest import make_cluster

    make_cluster(tmp_path, name="jupiter", gpu_type="B200", factor="2.000")
    job = submit(researcher, gpus=2)
    run_pass(job.cluster_id)
    frozen.shift(dt.timedelta(seconds=100))
    charge_running_jobs()
    [entry] = UsageEntry.objects.filter(job_ref=job.pk)
    assert (entry.gpu_seconds, entry.cost_gpu_seconds) == (200, 400)


def test_unfunded_work_is_never_charged(outsider, cluster, frozen, run_pass):
    from scheduling.accounting import charge_running_jobs

    job = submit(outsider, project="")
    run_pass(cluster)
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING and not job.funded
    frozen.shift(dt.timedelta(hours=1))
    assert charge_running_jobs() == 0
    assert not UsageEntry.objects.filter(job_ref=job.pk).exists()


def test_funded_work_preempts_unfunded_work_which_is_requeued(
    researcher, outsider, cluster, frozen, run_pass
):
    squatter = submit(outsider, project="", gpus=16, name="squat")
    run_pass(cluster)
    frozen.shift(dt.timedelta(minutes=5))
    funded = submit(researcher, gpus=8)
    run_pass(cluster)
    squatter.refresh_from_db()
    funded.refresh_from_db()
    assert funded.state == Job.State.RUNNING
    assert squatter.state == Job.State.PENDING  # preempted, stopped on the backend, requeued
    assert squatter.run_seconds_done == 300
    assert squatter.first_started_at == T0  # its wait ended at its first start
    kinds = list(squatter.events.values_list("kind", flat=True))
    assert kinds == ["submitted", "running", "preempted", "requeued"]
    states = {r.attempt_key: r.state for r in remote_jobs(cluster)}
    assert states[squatter.attempt_key] == RemoteState.PREEMPTED


def test_a_job_that_finishes_on_the_backend_is_closed_and_charged_to_its_end(
    researcher, cluster, frozen, run_pass
):
    job = submit(researcher, gpus=1)  # sim_duration_s=7200 at speed 1
    run_pass(cluster)
    frozen.shift(dt.timedelta(seconds=7300))
    report = sync_cluster(cluster.pk)
    job.refresh_from_db()
    assert report.finished == [job.pk]
    assert job.state == Job.State.COMPLETED
    assert (
        sum(UsageEntry.objects.filter(job_ref=job.pk).values_list("gpu_seconds", flat=True)) == 7200
    )
    assert job.ended_at == T0 + dt.timedelta(seconds=7200)
    assert Lien.objects.get(job_ref=job.pk).released_at is not None


def test_cancelling_a_running_job_stops_it_on_the_backend(
    researcher, cluster, frozen, run_pass, committed
):
    job = submit(researcher)
    run_pass(cluster)
    with committed():
        cancel_job(researcher, job.pk)
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED
    assert remote_jobs(cluster)[0].state == RemoteState.CANCELLED


def test_explain_reports_the_funding_chain_and_the_rate(
    client, researcher, cluster, frozen, run_pass
):
    job = submit(researcher, gpus=8)
    run_pass(cluster)
    frozen.shift(dt.timedelta(minutes=30))
    client.force_login(researcher)
    body = client.get(f"/api/v1/jobs/{job.pk}/explain/").json()
    assert body["funded"] is True
    assert body["funding_chain"] == ["nlp", "nlp/olmo"]
    assert body["gpu_hours_per_hour"] == 8.0
    assert body["gpu_hours_so_far"] == pytest.approx(4.0)
    assert body["protected_until"] == (T0 + dt.timedelta(hours=1)).isoformat()
    assert [s["path"] for s in body["standing"]] == ["nlp", "nlp/olmo"]
    assert body["preemptible_by"]


def test_a_drained_node_takes_nothing_new_and_reports_when_it_is_empty(
    researcher, cluster_admin, cluster, frozen, run_pass
):
    from scheduling.services import set_node_drain

    first = submit(researcher, gpus=8, name="on-node")
    run_pass(cluster)
    first.refresh_from_db()
    busy = cluster.nodes.get(name=first.nodes[0][0])
    set_node_drain(cluster_admin, busy.pk, True, "replace a fan")
    run_pass(cluster)
    busy.refresh_from_db()
    assert busy.drained_by == T0 + dt.timedelta(hours=1)
    second = submit(researcher, gpus=8, name="next")
    run_pass(cluster)
    second.refresh_from_db()
    assert second.state == Job.State.RUNNING
    assert second.nodes[0][0] != busy.name
    assert timezone.now() == T0


def test_charging_reads_each_gpu_type_once_not_once_per_job(researcher, cluster, frozen, run_pass):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scheduling.accounting import charge_running_jobs

    for index in range(4):
        submit(researcher, gpus=2, name=f"j{index}")
    run_pass(cluster)
    frozen.shift(dt.timedelta(minutes=5))
    with CaptureQueriesContext(connection) as queries:
        charge_running_jobs()
    type_reads = [
        q
        for q in queries.captured_queries
        if "budgets_gputype" in q["sql"]
        and q["sql"].lstrip().upper().startswith("SELECT")
        and "budgets_usageentry" not in q["sql"]
    ]
    assert len(type_reads) == 1


def test_the_displacement_memory_survives_between_live_passes(
    researcher, cluster, frozen, run_pass
):
    """A preemption for standing is written on the victim's timeline and read back into the
    next snapshot, so the engine's no-ping-pong memory holds in the live loop too."""
    from scheduling.apply import _remember_displacements
    from scheduling.engine import model as m
    from scheduling.snapshot import build_snapshot

    winner = submit(researcher, name="winner")
    victim = submit(researcher, name="victim")
    run_pass(cluster)
    winner.refresh_from_db()
    assert winner.state == Job.State.RUNNING
    ctx = build_snapshot(cluster)
    memory = m.Displacement(str(victim.pk), "nlp/olmo", str(winner.pk), "nlp/olmo", T0.timestamp())
    _remember_displacements(ctx, m.Decisions(displacements=(memory,)), T0)
    assert build_snapshot(cluster).snapshot.displacements == (memory,)
    frozen.shift(dt.timedelta(hours=9))  # past the memory
    assert build_snapshot(cluster).snapshot.displacements == ()
