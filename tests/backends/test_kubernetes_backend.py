"""The Kubernetes adapter driven through the official client against the local fake API."""

from __future__ import annotations

import json
import time

import pytest

from scheduling.backends.base import (
    BackendError,
    BackendUnavailable,
    LaunchSpec,
    RemoteState,
    get_backend,
)
from scheduling.backends.kubernetes import (
    ANN_PREEMPTED,
    KubernetesBackend,
    job_manifest,
    job_name,
    label_value,
)
from tests.backends.k8s_fake import (  # noqa: F401 - the fixture is used by name
    DNS_LABEL,
    LABEL_VALUE,
    FakeKubernetes,
    fake_api_fixture,
)

pytestmark = pytest.mark.kubernetes


@pytest.fixture
def k8s(fake_api):
    return KubernetesBackend("alpha", {"host": fake_api.url, "timeout": "2"})


def launch(job_id=7, attempt="7-1", nodes=("gpu-01",), gpus_per_node=8, **kw) -> LaunchSpec:
    return LaunchSpec(
        job_id=job_id,
        attempt_key=attempt,
        name=kw.pop("name", "train-olmo"),
        user=kw.pop("user", "rita"),
        project=kw.pop("project", "nlp/olmo"),
        gpus=gpus_per_node * len(nodes),
        nodes=tuple(nodes),
        gpus_per_node=gpus_per_node,
        command=kw.pop("command", "python train.py"),
        **kw,
    )


def requests(fake, method, suffix=""):
    return [r for r in fake.requests if r["method"] == method and r["path"].endswith(suffix)]


# -- starting ------------------------------------------------------------------------------------
def test_a_start_creates_the_job_suspended_then_unsuspends_it_with_a_merge_patch(fake_api, k8s):
    k8s.submit(launch())

    (create,) = requests(fake_api, "POST", "/jobs")
    assert json.loads(create["body"])["spec"]["suspend"] is True
    (patch,) = requests(fake_api, "PATCH")
    assert patch["content_type"] == "application/merge-patch+json"
    assert json.loads(patch["body"]) == {"spec": {"suspend": False}}
    assert fake_api.job(job_name(7, "7-1"))["spec"]["suspend"] is False


def test_the_job_carries_the_allot_ids_as_labels_and_project_and_user_as_annotations(fake_api, k8s):
    k8s.submit(launch())

    meta = fake_api.job(job_name(7, "7-1"))["metadata"]
    assert meta["labels"]["allot.dev/job-id"] == "7"
    assert meta["labels"]["allot.dev/attempt"] == "7-1"
    assert meta["labels"]["allot.dev/cluster"] == "alpha"
    assert meta["annotations"]["allot.dev/project"] == "nlp/olmo"
    assert meta["annotations"]["allot.dev/user"] == "rita"
    pod_labels = fake_api.pods_of(meta["name"])[0]["metadata"]["labels"]
    assert pod_labels["allot.dev/job-id"] == "7"


def test_the_container_requests_and_limits_the_gpus_per_node(fake_api, k8s):
    k8s.submit(launch(nodes=("gpu-03",), gpus_per_node=4))

    container = fake_api.job(job_name(7, "7-1"))["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"nvidia.com/gpu": "4"}
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    assert container["command"] == ["/bin/sh", "-c", "python train.py"]


def test_placement_is_pinned_to_the_chosen_node_by_required_hostname_affinity(fake_api, k8s):
    k8s.submit(launch(nodes=("gpu-02",)))

    pod_spec = fake_api.job(job_name(7, "7-1"))["spec"]["template"]["spec"]
    required = pod_spec["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert required["nodeSelectorTerms"] == [
        {
            "matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-02"]}
            ]
        }
    ]
    assert [p["spec"]["nodeName"] for p in fake_api.pods_of(job_name(7, "7-1"))] == ["gpu-02"]


def test_a_multi_node_job_runs_one_pod_on_each_chosen_node(fake_api, k8s):
    # 4 GPUs per node would let both pods share one 8-GPU node without the anti-affinity.
    k8s.submit(launch(nodes=("gpu-01", "gpu-02"), gpus_per_node=4))

    job = fake_api.job(job_name(7, "7-1"))
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 2
    nodes = sorted(p["spec"]["nodeName"] for p in fake_api.pods_of(job["metadata"]["name"]))
    assert nodes == ["gpu-01", "gpu-02"]


def test_a_time_limit_becomes_the_active_deadline(fake_api, k8s):
    k8s.submit(launch(time_limit_s=3600))

    assert fake_api.job(job_name(7, "7-1"))["spec"]["activeDeadlineSeconds"] == 3600


def test_submit_reports_the_job_started_on_the_chosen_nodes(k8s):
    remote = k8s.submit(launch(nodes=("gpu-01",)))

    assert remote.state == RemoteState.RUNNING
    assert remote.nodes == ("gpu-01",)
    assert remote.external_id == job_name(7, "7-1")
    assert (remote.job_id, remote.attempt_key) == (7, "7-1")


# -- idempotence ---------------------------------------------------------------------------------
def test_submitting_the_same_attempt_twice_launches_one_job(fake_api, k8s):
    first = k8s.submit(launch())
    second = k8s.submit(launch())

    assert first.external_id == second.external_id
    assert len(fake_api.jobs) == 1
    assert len(requests(fake_api, "POST", "/jobs")) == 1
    assert len(fake_api.pods_of(first.external_id)) == 1


def test_a_create_that_collides_with_a_concurrent_retry_returns_the_existing_job(
    fake_api, k8s, monkeypatch
):
    k8s.submit(launch())
    real_get = k8s._get_job
    calls = []

    def first_lookup_misses(name):  # the other retry created it right after our lookup
        calls.append(name)
        return None if len(calls) == 1 else real_get(name)

    monkeypatch.setattr(k8s, "_get_job", first_lookup_misses)
    remote = k8s.submit(launch())

    assert remote.external_id == job_name(7, "7-1")
    assert len(requests(fake_api, "POST", "/jobs")) == 2  # the second create answered 409
    assert len(fake_api.jobs) == 1


def test_a_retry_after_a_crash_between_create_and_unsuspend_finishes_the_start(fake_api, k8s):
    manifest = job_manifest(launch(), "alpha", "allot-jobs", "busybox", "nvidia.com/gpu")
    k8s._call(
        "create",
        __import__("kubernetes").client.BatchV1Api(k8s.api).create_namespaced_job,
        "allot-jobs",
        __import__("kubernetes").client.V1Job.from_dict(manifest),
    )
    assert fake_api.pods_of(job_name(7, "7-1")) == []

    k8s.submit(launch())

    assert len(fake_api.jobs) == 1
    assert len(fake_api.pods_of(job_name(7, "7-1"))) == 1


def test_odd_attempt_keys_still_give_distinct_valid_names_and_labels():
    keys = ["7-1", "7-2", "Job 7 / Attempt #2", "x" * 80, "x" * 81, "-edge-"]
    names = [job_name(7, key) for key in keys]

    assert all(DNS_LABEL.match(name) and len(name) <= 63 for name in names)
    assert len(set(names)) == len(keys)
    assert all(LABEL_VALUE.match(label_value(key)) and len(label_value(key)) <= 63 for key in keys)
    assert len({label_value(key) for key in keys}) == len(keys)


def test_a_cluster_name_that_is_not_a_valid_label_still_tags_and_finds_its_jobs(fake_api):
    backend = KubernetesBackend("GPU cluster (west)", {"host": fake_api.url})
    backend.submit(launch())

    assert [job.job_id for job in backend.sync()] == [7]


# -- preempt and cancel --------------------------------------------------------------------------
def test_preempting_suspends_the_job_so_its_pods_go_but_the_job_stays(fake_api, k8s):
    remote = k8s.submit(launch())

    k8s.preempt(7, remote.external_id)

    job = fake_api.job(remote.external_id)
    assert job["spec"]["suspend"] is True
    assert ANN_PREEMPTED in job["metadata"]["annotations"]
    assert fake_api.pods_of(remote.external_id) == []
    assert [(j.job_id, j.state) for j in k8s.sync()] == [(7, RemoteState.PREEMPTED)]


def test_restarting_after_preemption_starts_a_new_job_and_drops_the_suspended_one(fake_api, k8s):
    old = k8s.submit(launch(attempt="7-1", nodes=("gpu-01",)))
    k8s.preempt(7, old.external_id)

    new = k8s.submit(launch(attempt="7-2", nodes=("gpu-02",)))

    assert list(fake_api.jobs) == [("allot-jobs", new.external_id)]
    assert [(j.state, j.nodes) for j in k8s.sync()] == [(RemoteState.RUNNING, ("gpu-02",))]


def test_preempting_a_job_that_belongs_to_another_allot_job_is_refused(fake_api, k8s):
    remote = k8s.submit(launch(job_id=7))

    with pytest.raises(BackendError, match="does not belong"):
        k8s.preempt(8, remote.external_id)
    assert fake_api.job(remote.external_id)["spec"]["suspend"] is False


def test_cancel_deletes_the_job_and_its_pods_in_the_background(fake_api, k8s):
    remote = k8s.submit(launch())

    k8s.cancel(7, remote.external_id)

    (delete,) = requests(fake_api, "DELETE")
    assert delete["query"]["propagationPolicy"] == "Background"
    assert fake_api.jobs == {}
    assert fake_api.pods == {}
    assert k8s.sync() == []


def test_cancelling_an_unknown_job_is_not_an_error(k8s):
    k8s.cancel(99, "allot-99-gone")

    assert k8s.sync() == []


# -- sync ----------------------------------------------------------------------------------------
def test_sync_maps_running_completed_failed_and_preempted_jobs(fake_api, k8s):
    running = k8s.submit(
        launch(job_id=1, attempt="1-1", nodes=("gpu-01", "gpu-02"), gpus_per_node=2)
    )
    done = k8s.submit(launch(job_id=2, attempt="2-1", nodes=("gpu-03",), gpus_per_node=1))
    failed = k8s.submit(launch(job_id=3, attempt="3-1", nodes=("gpu-03",), gpus_per_node=1))
    preempted = k8s.submit(launch(job_id=4, attempt="4-1", nodes=("gpu-01",), gpus_per_node=1))
    fake_api.complete_job(done.external_id)
    fake_api.fail_job(failed.external_id, exit_code=137)
    k8s.preempt(4, preempted.external_id)

    seen = {job.job_id: job for job in k8s.sync()}

    assert seen[1].state == RemoteState.RUNNING
    assert seen[1].nodes == ("gpu-01", "gpu-02")
    assert (seen[2].state, seen[2].exit_code) == (RemoteState.COMPLETED, 0)
    assert (seen[3].state, seen[3].exit_code) == (RemoteState.FAILED, 137)
    assert seen[3].extra["reason"] == "BackoffLimitExceeded"
    assert seen[4].state == RemoteState.PREEMPTED
    assert seen[1].external_id == running.external_id
    assert seen[2].attempt_key == "2-1"


def test_sync_reports_a_started_job_whose_pods_cannot_be_placed_as_pending(fake_api, k8s):
    # Someone outside Allot cordoned the node after the engine chose it.
    fake_api.nodes["gpu-01"]["spec"]["unschedulable"] = True

    k8s.submit(launch(nodes=("gpu-01",)))

    (job,) = k8s.sync()
    assert job.state == RemoteState.PENDING
    assert job.nodes == ()


def test_sync_sees_only_this_clusters_jobs(fake_api, k8s):
    k8s.submit(launch(job_id=1, attempt="1-1"))
    other = KubernetesBackend("beta", {"host": fake_api.url})
    other.submit(launch(job_id=2, attempt="2-1", nodes=("gpu-02",)))

    assert [job.job_id for job in k8s.sync()] == [1]
    assert [job.job_id for job in other.sync()] == [2]


# -- nodes ---------------------------------------------------------------------------------------
def test_discovery_reads_allocatable_gpus_and_the_gpu_type_label_and_skips_cpu_nodes(k8s):
    nodes = {node.name: node for node in k8s.discover_nodes()}

    assert sorted(nodes) == ["gpu-01", "gpu-02", "gpu-03"]
    assert (nodes["gpu-01"].gpus, nodes["gpu-01"].gpu_type) == (8, "NVIDIA-H100-80GB-HBM3")
    assert (nodes["gpu-03"].gpus, nodes["gpu-03"].gpu_type) == (4, "NVIDIA-A100-SXM4-40GB")
    assert not any(node.drained for node in nodes.values())


def test_discovery_uses_the_configured_gpu_type_label_and_node_selector(fake_api):
    fake_api.add_node(
        "amd-01",
        gpus=8,
        gpu_type="MI300X",
        label="example.com/gpu-model",
        labels={"pool": "research"},
    )
    fake_api.nodes["amd-01"]["status"]["allocatable"]["nvidia.com/gpu"] = "8"
    backend = KubernetesBackend(
        "alpha",
        {
            "host": fake_api.url,
            "node_selector": "pool=research",
            "gpu_type_label": "example.com/gpu-model",
        },
    )

    (node,) = backend.discover_nodes()

    assert (node.name, node.gpu_type, node.gpus) == ("amd-01", "MI300X", 8)


def test_a_cordoned_or_not_ready_node_is_discovered_as_drained(fake_api, k8s):
    fake_api.add_node("gpu-04", unschedulable=True)
    fake_api.add_node("gpu-05", ready=False)

    nodes = {node.name: node for node in k8s.discover_nodes()}

    assert (nodes["gpu-04"].drained, nodes["gpu-04"].reason) == (True, "cordoned")
    assert (nodes["gpu-05"].drained, nodes["gpu-05"].reason) == (True, "node not ready")


def test_drain_cordons_the_node_with_the_reason_and_undrain_uncordons_it(fake_api, k8s):
    k8s.drain_node("gpu-02", "ECC errors")

    assert fake_api.nodes["gpu-02"]["spec"]["unschedulable"] is True
    drained = {node.name: node for node in k8s.discover_nodes()}["gpu-02"]
    assert (drained.drained, drained.reason) == (True, "ECC errors")

    k8s.undrain_node("gpu-02")

    assert "unschedulable" not in fake_api.nodes["gpu-02"]["spec"]
    assert "allot.dev/drain-reason" not in fake_api.nodes["gpu-02"]["metadata"]["annotations"]
    assert not {node.name: node for node in k8s.discover_nodes()}["gpu-02"].drained


def test_draining_an_unknown_node_is_refused_with_the_api_message(k8s):
    with pytest.raises(BackendError, match='nodes "gpu-99" not found') as caught:
        k8s.drain_node("gpu-99", "gone")

    assert not isinstance(caught.value, BackendUnavailable)


# -- outages and refusals ------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["503", "hang", "drop"])
def test_an_api_server_that_does_not_answer_makes_every_call_backend_unavailable(fake_api, mode):
    backend = KubernetesBackend("alpha", {"host": fake_api.url, "timeout": "0.5"})
    fake_api.outage = mode
    calls = [
        backend.sync,
        backend.discover_nodes,
        lambda: backend.submit(launch()),
        lambda: backend.preempt(7, "allot-7-7-1"),
        lambda: backend.cancel(7, "allot-7-7-1"),
        lambda: backend.drain_node("gpu-01", "x"),
    ]

    for call in calls:
        started = time.monotonic()
        with pytest.raises(BackendUnavailable):
            call()
        assert time.monotonic() - started < 2.0  # the timeout bounds a hung server


def test_a_stopped_api_server_is_unavailable_not_an_error(fake_api, k8s):
    fake_api.stop()

    with pytest.raises(BackendUnavailable, match="unreachable"):
        k8s.sync()


def test_a_job_that_finished_during_an_outage_is_reported_completed_when_the_api_returns(
    fake_api, k8s
):
    remote = k8s.submit(launch())
    fake_api.outage = "503"
    with pytest.raises(BackendUnavailable):
        k8s.sync()
    fake_api.complete_job(remote.external_id)

    fake_api.outage = None
    (job,) = k8s.sync()

    assert (job.job_id, job.state, job.exit_code) == (7, RemoteState.COMPLETED, 0)


def test_a_refusal_is_a_backend_error_carrying_the_api_servers_message(fake_api):
    backend = KubernetesBackend("alpha", {"host": fake_api.url, "namespace": "missing"})

    with pytest.raises(BackendError, match='namespaces "missing" not found') as caught:
        backend.submit(launch())

    assert not isinstance(caught.value, BackendUnavailable)


# -- connecting ----------------------------------------------------------------------------------
def test_a_bearer_token_is_sent_and_a_wrong_one_is_refused():
    fake = FakeKubernetes(token="s3cret").start()
    fake.add_node("gpu-01")
    try:
        good = KubernetesBackend("alpha", {"host": fake.url, "token": "s3cret"})
        bad = KubernetesBackend("alpha", {"host": fake.url, "token": "wrong"})

        assert [node.name for node in good.discover_nodes()] == ["gpu-01"]
        with pytest.raises(BackendError, match="Unauthorized"):
            bad.discover_nodes()
    finally:
        fake.stop()


def test_a_kubeconfig_file_selects_the_server_and_credentials(fake_api, tmp_path):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "lab",
                "clusters": [{"name": "lab", "cluster": {"server": fake_api.url}}],
                "users": [{"name": "allot", "user": {"token": "abc"}}],
                "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "allot"}}],
            }
        )
    )
    backend = KubernetesBackend("alpha", {"kubeconfig": str(kubeconfig)})

    assert len(backend.discover_nodes()) == 3
    assert fake_api.requests[-1]["path"] == "/api/v1/nodes"


def test_a_broken_kubeconfig_is_an_error_not_a_crash(tmp_path):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text("clusters: [this is not: a kubeconfig")

    with pytest.raises(BackendError, match="cannot load the connection settings"):
        KubernetesBackend("alpha", {"kubeconfig": str(kubeconfig)}).sync()


def test_missing_connection_settings_are_an_error_that_says_what_to_set():
    with pytest.raises(BackendError, match="kubeconfig"):
        KubernetesBackend("alpha", {}).sync()


def test_the_registry_builds_the_kubernetes_backend_with_its_options(fake_api):
    backend = get_backend("kubernetes", "alpha", {"host": fake_api.url, "namespace": "team"})

    assert isinstance(backend, KubernetesBackend)
    assert backend.namespace == "team"
