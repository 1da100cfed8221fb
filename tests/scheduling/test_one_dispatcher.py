"""The pass's dispatch task and reconcile's redispatch of one start may run at once. They must
not call the backend's submit at the same time: on Slurm both would sbatch before either saw
the other's job, and a caller that died before cancelling its copy left the attempt running
twice (seen in the fault suite). The second waits and then finds the first's launch."""

import threading
import time

import pytest
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
