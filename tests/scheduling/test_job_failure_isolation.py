"""One job's failure is recorded on that job and never stops the others: a backend that refuses
one job's start (a command too long for sbatch, an account sudo does not know) fails that job,
with the backend's words on its page, while the rest of the cluster is dispatched and synced."""

import pytest

from scheduling import dispatch, passes, reconcile
from scheduling.backends.base import BackendError
from scheduling.models import Cluster, Job
from scheduling.services import JobRequest, submit_job

REFUSAL = "slurm[jupiter]: sbatch failed: sbatch: error: Batch job submission failed: too long"


@pytest.fixture
def picky_backend(monkeypatch):
    """The real (simulated) backend, except that it refuses to start the jobs named 'bad'."""
    real = dispatch.backend_for

    def backend_for(cluster):
        backend = real(cluster)
        submit = backend.submit

        def picky_submit(spec):
            if spec.name == "bad":
                raise BackendError(REFUSAL)
            return submit(spec)

        backend.submit = picky_submit
        return backend

    monkeypatch.setattr(dispatch, "backend_for", backend_for)
    monkeypatch.setattr(reconcile, "backend_for", backend_for)


def two_jobs(researcher):
    return [
        submit_job(
            researcher,
            JobRequest(name=name, project="nlp/olmo", cluster="jupiter", gpus=2, min_runtime_s=60),
        )
        for name in ("bad", "good")
    ]


def assert_bad_failed_and_good_runs(bad, good, client, researcher):
    bad.refresh_from_db()
    good.refresh_from_db()
    assert bad.state == Job.State.FAILED
    assert "too long" in bad.last_error
    assert "too long" in bad.events.last().message
    assert good.state == Job.State.RUNNING and good.dispatched
    client.force_login(researcher)
    page = client.get(f"/jobs/{bad.pk}/").content.decode()
    assert "Cluster error" in page and "too long" in page
    assert "too long" in client.get(f"/api/v1/jobs/{bad.pk}/").json()["last_error"]


def test_a_refused_dispatch_fails_that_job_alone(
    client, researcher, cluster, picky_backend, run_pass
):
    bad, good = two_jobs(researcher)
    run_pass(cluster)
    assert_bad_failed_and_good_runs(bad, good, client, researcher)


def test_reconcile_handles_each_job_apart_and_the_cluster_still_syncs(
    client, researcher, cluster, picky_backend
):
    bad, good = two_jobs(researcher)
    passes.run_pass(cluster.pk)  # committed, but the worker died before dispatching either
    report = reconcile.sync_cluster(cluster.pk)
    assert report is not None and good.pk in report.redispatched
    cluster = Cluster.objects.get(pk=cluster.pk)
    assert cluster.reachable and cluster.last_error == ""
    assert_bad_failed_and_good_runs(bad, good, client, researcher)


def test_the_form_refuses_a_command_longer_than_the_api_allows(client, researcher, cluster):
    client.force_login(researcher)
    form = {
        "name": "long",
        "project": "nlp/olmo",
        "cluster": "jupiter",
        "gpus": 1,
        "min_runtime_hours": "1",
        "kind": "batch",
        "command": "x" * (128 * 1024),
    }
    response = client.post("/jobs/", form)
    assert Job.objects.count() == 0
    assert "at most 10000 characters" in response.content.decode()


def test_a_refused_stop_is_recorded_on_the_job(
    client, researcher, cluster, monkeypatch, run_pass, committed
):
    job = submit_job(
        researcher,
        JobRequest(name="t", project="nlp/olmo", cluster="jupiter", gpus=2, min_runtime_s=60),
    )
    run_pass(cluster)
    real = dispatch.backend_for

    def refusing(cluster):
        backend = real(cluster)

        def refuse(job_id, external_id):
            raise BackendError("slurm[jupiter]: scancel failed: Access/permission denied")

        backend.cancel = backend.preempt = refuse
        return backend

    monkeypatch.setattr(dispatch, "backend_for", refusing)
    client.force_login(researcher)
    with committed():
        assert client.post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 200
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED
    assert "permission denied" in job.last_error
