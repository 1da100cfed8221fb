"""The pass's dispatch task and reconcile's redispatch of one start may run at once. They must
not call the backend's submit at the same time: on Slurm both would sbatch before either saw
the other's job, and a caller that died before cancelling its copy left the attempt running
twice (seen in the fault suite). The second waits and then finds the first's launch. A stop
of the attempt waits for a dispatch in flight in the same way, so it sees what it launched."""

import datetime as dt
import threading
import time

import pytest
import time_machine
from django.db import connection

from scheduling import dispatch, passes
from scheduling.backends.base import RemoteJob, RemoteState
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job
from tests.scheduling.conftest import make_cluster


class SlowBackend:
    """Counts submits that run at the same time; each takes a while, like sbatch."""

    def __init__(self):
        self.lock = threading.Lock()
        self.inside = self.most = 0

    def submit(self, spec):
        with self.lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
        time.sleep(0.5)
        with self.lock:
            self.inside -= 1
        return RemoteJob(spec.job_id, "slow-1", spec.attempt_key, RemoteState.PENDING)


@pytest.mark.django_db(transaction=True)
def test_two_dispatchers_of_one_start_reach_the_backend_one_after_the_other(
    researcher, tmp_path, monkeypatch
):
    cluster = make_cluster(tmp_path)
    request = JobRequest(name="t", project="nlp/olmo", cluster="jupiter", gpus=1, min_runtime_s=60)
    job = submit_job(researcher, request)
    with monkeypatch.context() as lost:  # committed, its dispatch lost (a broker restart)
        lost.setattr(dispatch, "enqueue_starts", lambda jobs: None)
        passes.run_pass(cluster.pk)
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING and not job.dispatched
    backend = SlowBackend()
    monkeypatch.setattr(dispatch, "backend_for", lambda cluster: backend)
    results = []

    def dispatcher():
        try:
            results.append(dispatch.start_on_backend(job.pk, job.attempt_key))
        finally:
            connection.close()

    threads = [threading.Thread(target=dispatcher) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert results == [True, True]
    assert backend.most == 1
    job.refresh_from_db()
    assert job.dispatched and job.external_id == "slow-1"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("by", ["the stop task", "reconcile"])
def test_a_stop_waits_for_the_dispatch_in_flight_and_stops_what_it_launched(
    researcher, cluster_admin, tmp_path, monkeypatch, by
):
    """The dispatch task has read the job (running) and is about to submit when a pass
    preempts the job (its node drained). The stop task, or reconcile, asks the backend
    whether it has the attempt: asked before the submit lands, the backend had nothing, so
    nothing was stopped there, the attempt ran on for a job Allot had requeued, and it was
    settled as forgotten. Both now wait for the dispatch lock, so they see the launch and
    stop it, and the run is charged to the preemption, not settled."""
    from scheduling import enqueue
    from scheduling.reconcile import sync_cluster
    from scheduling.services import set_node_drain

    cluster = make_cluster(tmp_path)
    request = JobRequest(name="t", project="nlp/olmo", cluster="jupiter", gpus=1, min_runtime_s=60)
    job = submit_job(researcher, request)
    monkeypatch.setattr(enqueue, "on_commit", lambda task_name, *args: None)  # run by hand here
    with time_machine.travel(dt.datetime.now(dt.UTC), tick=True) as clock:
        passes.run_pass(cluster.pk)
        job.refresh_from_db()
        key = job.attempt_key
        about_to_submit, go_on = threading.Event(), threading.Event()

        def paused(name):
            if name == "dispatch.before_submit":
                about_to_submit.set()
                assert go_on.wait(30)

        monkeypatch.setattr(dispatch, "fault_point", paused)

        def run(call, *args, **kwargs):
            try:
                call(*args, **kwargs)
            finally:
                connection.close()

        sending = threading.Thread(target=run, args=(dispatch.start_on_backend, job.pk, key))
        sending.start()
        assert about_to_submit.wait(30)
        clock.shift(600)  # past its protection
        set_node_drain(cluster_admin, cluster.nodes.get(name=job.nodes[0][0]).pk, True, "repair")
        passes.run_pass(cluster.pk)
        job.refresh_from_db()
        assert job.state == Job.State.PREEMPTED
        if by == "reconcile":
            stopping = threading.Thread(target=run, args=(sync_cluster, cluster.pk))
        else:
            stopping = threading.Thread(target=run, args=(dispatch.stop_on_backend, job.pk, key))
        stopping.start()
        time.sleep(0.5)  # it asks the backend now, unless it waits for the dispatch
        go_on.set()
        sending.join(timeout=30)
        stopping.join(timeout=30)
    [remote] = dispatch.backend_for(cluster).sync()
    assert (remote.attempt_key, remote.state) == (key, RemoteState.PREEMPTED)
    job.refresh_from_db()
    assert job.state == Job.State.PENDING
    assert not job.events.filter(kind="charges_settled").exists()


@pytest.mark.django_db(transaction=True)
def test_a_dispatch_waiting_on_the_backend_holds_up_no_other_writer(
    researcher, tmp_path, monkeypatch
):
    """On SQLite every transaction holds the database's only write lock from its BEGIN, and the
    dispatch lock was taken in one: while a backend's submit took its time (an unresponsive
    Slurm controller: 30 s a command), every submission, pass and sync of every process
    waited, and past the busy timeout failed ("database is locked")."""
    cluster = make_cluster(tmp_path)
    request = JobRequest(name="t", project="nlp/olmo", cluster="jupiter", gpus=1, min_runtime_s=60)
    job = submit_job(researcher, request)
    with monkeypatch.context() as lost:
        lost.setattr(dispatch, "enqueue_starts", lambda jobs: None)
        passes.run_pass(cluster.pk)
    job.refresh_from_db()
    submitting, go_on = threading.Event(), threading.Event()

    class StuckBackend(SlowBackend):
        def submit(self, spec):
            submitting.set()
            go_on.wait(10)
            return RemoteJob(spec.job_id, "stuck-1", spec.attempt_key, RemoteState.PENDING)

    monkeypatch.setattr(dispatch, "backend_for", lambda cluster: StuckBackend())

    def dispatcher():
        try:
            dispatch.start_on_backend(job.pk, job.attempt_key)
        finally:
            connection.close()

    thread = threading.Thread(target=dispatcher)
    thread.start()
    assert submitting.wait(10)
    began = time.monotonic()
    submit_job(researcher, request)
    waited = time.monotonic() - began
    go_on.set()
    thread.join(timeout=30)
    assert waited < 2
    job.refresh_from_db()
    assert job.dispatched and job.external_id == "stuck-1"
