"""Reconcile compares a backend snapshot with rows it reads afterwards: a dispatch that lands
in between must not be taken for a lost attempt. Found by the fault-injection suite."""

import scheduling.tasks  # noqa: F401 - registers the tasks the eager dispatch runs by name
from scheduling import dispatch
from scheduling.models import Job
from scheduling.reconcile import reconcile_cluster
from scheduling.services import JobRequest, submit_job


def test_a_dispatch_landing_after_the_backend_snapshot_is_not_taken_for_lost(
    researcher, cluster, run_pass, monkeypatch
):
    monkeypatch.setattr(dispatch, "enqueue_starts", lambda jobs: None)  # dispatch comes later
    job = submit_job(
        researcher,
        JobRequest(
            name="train", project="nlp/olmo", cluster="jupiter", gpus=8, min_runtime_s=3600,
            sim_duration_s=7200,
        ),
    )  # fmt: skip
    run_pass(cluster)
    backend = dispatch.backend_for(cluster)
    snapshot = backend.sync()  # the sync asks the backend: nothing runs yet
    job.refresh_from_db()
    assert dispatch.start_on_backend(job.pk, job.attempt_key)  # the dispatch task lands

    report = reconcile_cluster(cluster, snapshot, backend)  # then reconcile reads the rows

    job.refresh_from_db()
    assert report.lost == []
    assert job.state == Job.State.RUNNING and job.dispatched
    assert [r.attempt_key for r in backend.sync()] == [job.attempt_key]
