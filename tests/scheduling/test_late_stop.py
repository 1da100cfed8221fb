"""A stop task can run late: a worker killed after taking it has it redelivered (acks-late), by
when the job may be running again under a new attempt. The late stop stops only the attempt it
was issued for, never the job's current one (the fault suite caught a new attempt preempted
by the previous attempt's stop, then taken for "stopped outside Allot" and requeued)."""

import datetime as dt

import pytest
import time_machine

from scheduling import dispatch, passes
from scheduling.backends.base import RemoteState
from scheduling.models import Job
from scheduling.reconcile import sync_cluster
from scheduling.services import JobRequest, cancel_job, submit_job

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)


def submit(user, gpus, project, name):
    request = JobRequest(
        name=name, project=project, cluster="jupiter", gpus=gpus, min_runtime_s=3600,
        sim_duration_s=7200,
    )  # fmt: skip
    return submit_job(user, request)


@pytest.mark.django_db
def test_a_late_stop_of_an_earlier_attempt_leaves_the_current_attempt_running(
    researcher, outsider, cluster, run_pass, committed, django_capture_on_commit_callbacks
):
    with time_machine.travel(T0, tick=False) as clock:
        squatter = submit(outsider, 16, "", "squat")
        run_pass(cluster)
        clock.shift(dt.timedelta(minutes=5))
        funded = submit(researcher, 8, "nlp/olmo", "train")
        # The pass preempts the squatter; what it enqueues after commit (the funded start, the
        # squatter's stop) is held back, as by a worker that died holding it.
        with django_capture_on_commit_callbacks(execute=False) as held:
            passes.run_pass(cluster.pk)
        squatter.refresh_from_db()
        first_key = squatter.attempt_key
        assert squatter.state == Job.State.PREEMPTED and held
        with committed():
            sync_cluster(cluster.pk)  # reconcile stops and requeues it, dispatches the start
            cancel_job(researcher, funded.pk)  # the GPUs come free
        clock.shift(dt.timedelta(minutes=1))
        run_pass(cluster)
        squatter.refresh_from_db()
        assert squatter.state == Job.State.RUNNING and squatter.attempt_key != first_key
        assert squatter.dispatched and squatter.external_id

        for task in held:  # redelivered now
            task()

        remote = {r.attempt_key: r for r in dispatch.backend_for(cluster).sync()}
        assert remote[squatter.attempt_key].state is RemoteState.RUNNING
        assert remote[first_key].state is RemoteState.PREEMPTED
        with committed():
            sync_cluster(cluster.pk)
        squatter.refresh_from_db()
        assert squatter.state == Job.State.RUNNING
        assert not squatter.events.filter(message__startswith="stopped outside Allot").exists()
