"""What a Kubernetes pod's environment holds: the job's shape and what the job declares —
nothing of Allot's bookkeeping, nothing of the worker's environment — and when its pods really
started, which sync reports so protection and charges count from then."""

from __future__ import annotations

import time

import pytest

from scheduling.backends.base import BackendError, RemoteState
from scheduling.backends.kubernetes import KubernetesBackend, job_name
from tests.backends.k8s_fake import fake_api_fixture  # noqa: F401 - the fixture is used by name
from tests.backends.test_kubernetes_backend import launch

pytestmark = pytest.mark.kubernetes

DECLARED = {"WANDB_PROJECT": "olmo", "TRICKY": 'a,b=c; it\'s "here" $(id)\nsecond line'}


@pytest.fixture
def k8s(fake_api):
    return KubernetesBackend("alpha", {"host": fake_api.url, "timeout": "2"})


def pod_env(fake_api, name: str) -> list[dict]:
    (pod, *_) = fake_api.pods_of(name)
    return pod["spec"]["containers"][0]["env"]


def test_a_pod_sees_what_its_job_declares_and_the_jobs_shape_only(fake_api, k8s, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://allot:hunter2@db/allot")
    monkeypatch.setenv("ALLOT_SECRET_KEY", "do-not-leak")
    k8s.submit(launch(nodes=("gpu-01", "gpu-02"), gpus_per_node=4, env=DECLARED))

    env = pod_env(fake_api, job_name(7, "7-1"))
    assert env == [
        {"name": "ALLOT_NODES", "value": "gpu-01,gpu-02"},
        {"name": "ALLOT_NUM_NODES", "value": "2"},
        {"name": "WANDB_PROJECT", "value": "olmo"},
        {"name": "TRICKY", "value": DECLARED["TRICKY"]},
    ]


def test_allots_ids_stay_in_labels_and_annotations_where_sync_and_retries_find_them(fake_api, k8s):
    first = k8s.submit(launch())
    names = {var["name"] for var in pod_env(fake_api, first.external_id)}
    assert not names & {"ALLOT_JOB_ID", "ALLOT_ATTEMPT"}
    assert k8s.submit(launch()).external_id == first.external_id  # a retry adopts, not doubles
    (synced,) = k8s.sync()
    assert (synced.job_id, synced.attempt_key, synced.state) == (7, "7-1", RemoteState.RUNNING)


def test_a_reserved_name_that_slipped_past_submission_is_refused_at_the_edge(k8s):
    with pytest.raises(BackendError, match="reserved"):
        k8s.submit(launch(env={"ALLOT_JOB_ID": "99"}))


def test_sync_reports_when_the_pods_really_started_not_when_the_job_was_created(fake_api, k8s):
    fake_api.kubelet_paused = True  # bound to their nodes, pulling the image
    remote = k8s.submit(launch(nodes=("gpu-01", "gpu-02"), gpus_per_node=4))
    (pending,) = k8s.sync()
    assert pending.state is RemoteState.RUNNING and pending.started_at is None

    (first, second) = fake_api.pods_of(remote.external_id)
    fake_api._run_pod(first)  # one rank up: the job has not started yet
    assert k8s.sync()[0].started_at is None

    time.sleep(1.1)  # the API's timestamps are whole seconds
    before = time.time() // 1
    fake_api.start_pods(remote.external_id)
    (started,) = k8s.sync()
    assert before <= started.started_at <= time.time()  # the last rank's start

    fake_api.complete_job(remote.external_id)
    (done,) = k8s.sync()
    assert done.state is RemoteState.COMPLETED and done.started_at == started.started_at
