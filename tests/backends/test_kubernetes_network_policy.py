"""Jobs of different projects cannot reach each other on a Kubernetes cluster: every start
gets a NetworkPolicy admitting ingress only from the pods of the same job, created before its
pods exist and garbage-collected with its Job. Checked against the fake API server, with the
shipped namespace policy applied beside, as a CNI that enforces NetworkPolicy would decide."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from scheduling.backends.base import LaunchSpec
from scheduling.backends.kubernetes import KubernetesBackend
from tests.backends.k8s_fake import fake_api_fixture  # noqa: F401 - the fixture is used by name

pytestmark = pytest.mark.kubernetes

SHIPPED = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "network-policy.yaml"


@pytest.fixture
def k8s(fake_api):
    for policy in yaml.safe_load_all(SHIPPED.read_text()):
        if policy:
            fake_api.add_network_policy(policy)
    return KubernetesBackend("alpha", {"host": fake_api.url, "timeout": "2"})


def launch(job_id, project, nodes, user="rita") -> LaunchSpec:
    return LaunchSpec(
        job_id, f"{job_id}-1", "train", user, project, 4 * len(nodes), tuple(nodes), 4, "true"
    )


def pods(fake, remote) -> list[dict]:
    found = fake.pods_of(remote.external_id)
    assert found, "the fake's Job controller made no pods"
    return found


def test_pods_of_different_projects_cannot_reach_each_other_while_a_jobs_own_pods_can(
    fake_api, k8s
):
    olmo = pods(fake_api, k8s.submit(launch(7, "nlp/olmo", ["gpu-01"])))
    vision = pods(fake_api, k8s.submit(launch(8, "vision/det", ["gpu-03"], user="vic")))
    pair = pods(fake_api, k8s.submit(launch(9, "nlp/tulu", ["gpu-01", "gpu-02"])))

    assert not fake_api.reachable(olmo[0], vision[0])
    assert not fake_api.reachable(vision[0], olmo[0])
    assert not fake_api.reachable(vision[0], pair[0])
    assert not fake_api.reachable(olmo[0], pair[1])
    assert fake_api.reachable(pair[0], pair[1])  # a multi-node job's rendezvous and NCCL
    assert fake_api.reachable(pair[1], pair[0])


def test_the_policy_exists_before_the_job_is_unsuspended_and_names_its_job(fake_api, k8s):
    remote = k8s.submit(launch(7, "nlp/olmo", ["gpu-01"]))

    policy = fake_api.network_policies[("allot-jobs", remote.external_id)]
    owner = fake_api.job(remote.external_id)["metadata"]
    assert policy["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": owner["name"], "uid": owner["uid"]}
    ]
    steps = [
        (r["method"], r["path"].split("/")[-1])
        for r in fake_api.requests
        if r["method"] in {"POST", "PATCH"}
    ]
    assert steps == [("POST", "jobs"), ("POST", "networkpolicies"), ("PATCH", remote.external_id)]


def test_a_retried_start_keeps_one_policy_and_cancelling_removes_it(fake_api, k8s):
    first = k8s.submit(launch(7, "nlp/olmo", ["gpu-01"]))
    k8s.submit(launch(7, "nlp/olmo", ["gpu-01"]))  # the same attempt again: 409s, no error
    mine = [k for k in fake_api.network_policies if k[1].startswith("allot-7-")]
    assert mine == [("allot-jobs", first.external_id)]

    k8s.cancel(7, first.external_id)

    assert ("allot-jobs", first.external_id) not in fake_api.network_policies


def test_a_new_attempt_gets_its_own_policy_and_the_earlier_one_goes_with_its_job(fake_api, k8s):
    first = k8s.submit(launch(7, "nlp/olmo", ["gpu-01"]))
    k8s.preempt(7, first.external_id)
    second = k8s.submit(
        LaunchSpec(7, "7-2", "train", "rita", "nlp/olmo", 4, ("gpu-02",), 4, "true")
    )

    assert [k[1] for k in fake_api.network_policies if k[1].startswith("allot-7-")] == [
        second.external_id
    ]


def test_isolate_jobs_false_leaves_isolation_to_the_clusters_own_policies(fake_api):
    k8s = KubernetesBackend("alpha", {"host": fake_api.url, "isolate_jobs": "false"})
    k8s.submit(launch(7, "nlp/olmo", ["gpu-01"]))

    assert fake_api.network_policies == {}
