"""The pass SQLite runs (the zero-server demo): snapshot and engine outside any transaction, so
submissions never wait for them; the write lock only to re-check and apply. Whatever changed
meanwhile that the decisions rest on makes the pass compute again, never apply stale ones.

These drive ``run_pass_optimistic`` on the suite's database: the re-checks are plain queries,
the same on any database. The SQLite lock itself is tested in tests/portal/test_sqlite_pass.py.
"""

import pytest
import time_machine

from budgets.models import Lien
from scheduling import passes
from scheduling.models import Job, JobEvent
from scheduling.services import cancel_job, set_node_drain
from tests.scheduling.test_live_pass import T0, remote_jobs, submit


@pytest.fixture
def frozen():
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


@pytest.fixture
def meanwhile(monkeypatch):
    """``meanwhile(action)``: ``action`` runs once, after the snapshot and while the engine
    computes, as another request or worker would; returns how often the engine ran."""
    calls = []

    def arrange(action):
        real = passes.schedule

        def engine(snapshot):
            calls.append(snapshot)
            if len(calls) == 1:
                action()
            return real(snapshot)

        monkeypatch.setattr(passes, "schedule", engine)
        return calls

    return arrange


def another_worker(cluster):
    """A pass of another worker process: on PostgreSQL the locked pass; on SQLite an
    optimistic one, which this process's own guard against a second pass of the same cluster
    (``passes._only_one_here``, process-local) would otherwise skip."""
    real = passes._in_flight
    passes._in_flight = set()
    try:
        return passes.run_pass(cluster.pk)
    finally:
        passes._in_flight = real


def test_the_pass_outside_the_lock_starts_and_explains_as_the_locked_one(
    researcher, cluster, frozen, optimistic
):
    job = submit(researcher)
    waiting = submit(researcher, gpus=16, name="big")
    result = optimistic(cluster)
    job.refresh_from_db()
    waiting.refresh_from_db()
    assert result.ran and result.started == 1
    assert job.state == Job.State.RUNNING and job.funded and job.dispatched
    assert job.explanation["funding_chain"]
    assert Lien.objects.filter(job_ref=job.pk).count() == 1
    assert waiting.pending_code and waiting.queue_position == 1
    assert [r.attempt_key for r in remote_jobs(cluster)] == [job.attempt_key]


def test_a_job_cancelled_while_the_engine_computes_is_not_started(
    researcher, cluster, frozen, optimistic, meanwhile
):
    job = submit(researcher)
    calls = meanwhile(lambda: cancel_job(researcher, job.pk))
    result = optimistic(cluster)
    job.refresh_from_db()
    assert len(calls) == 2  # the decisions were dropped and computed again
    assert result.ran and result.started == 0
    assert job.state == Job.State.CANCELLED
    assert not JobEvent.objects.filter(job=job, kind="running").exists()
    assert not Lien.objects.filter(job_ref=job.pk).exists() and remote_jobs(cluster) == []


def test_a_pass_that_commits_first_wins_and_nothing_starts_twice(
    researcher, cluster, frozen, optimistic, meanwhile
):
    job = submit(researcher)
    calls = meanwhile(lambda: another_worker(cluster))
    result = optimistic(cluster)
    job.refresh_from_db()
    assert len(calls) == 3  # this pass, the other one (same engine), this one again
    assert result.ran and result.started == 0  # the second look saw it running
    assert job.attempt == 1
    assert JobEvent.objects.filter(job=job, kind="running").count() == 1
    assert Lien.objects.filter(job_ref=job.pk).count() == 1


def test_a_node_drained_while_the_engine_computes_gets_no_new_work(
    researcher, cluster_admin, cluster, frozen, optimistic, meanwhile
):
    jobs = [submit(researcher, name=f"train-{i}") for i in range(2)]  # one per node
    node = cluster.nodes.get(name="jupiter-00")
    calls = meanwhile(lambda: set_node_drain(cluster_admin, node.pk, True, "maintenance"))
    result = optimistic(cluster)
    assert len(calls) == 2
    assert result.started == 1
    started = Job.objects.get(pk__in=[j.pk for j in jobs], state=Job.State.RUNNING)
    assert [name for name, _ in started.nodes] == ["jupiter-01"]


def test_a_running_job_that_ends_meanwhile_does_not_stop_the_pass(
    researcher, cluster, frozen, optimistic, meanwhile
):
    first = submit(researcher, name="first")
    optimistic(cluster)
    second = submit(researcher, name="second")
    calls = meanwhile(lambda: cancel_job(researcher, first.pk))
    result = optimistic(cluster)
    first.refresh_from_db()
    second.refresh_from_db()
    assert len(calls) == 1  # frees capacity only: the decisions stand
    assert result.ran and result.started == 1 and second.state == Job.State.RUNNING
    assert first.state == Job.State.CANCELLED


def test_a_second_pass_of_the_same_cluster_in_this_process_skips(
    researcher, cluster, frozen, optimistic, meanwhile
):
    submit(researcher)
    inner = []
    meanwhile(lambda: inner.append(passes.run_pass_optimistic(cluster.pk)))
    assert optimistic(cluster).started == 1
    assert inner[0].ran is False
