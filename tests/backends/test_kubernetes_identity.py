"""Kubernetes pods run as their owner, non-root, without a service-account token, in a
namespace apart from Allot's own secret, behind the shipped NetworkPolicy."""

from pathlib import Path

import pytest
import yaml

from scheduling.backends.base import BackendError, LaunchSpec
from scheduling.backends.kubernetes import KubernetesBackend
from scheduling.backends.kubernetes_objects import job_manifest

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"


def spec(uid=5001, gid=5000) -> LaunchSpec:
    return LaunchSpec(
        7, "7-1-ab", "train", "rita", "nlp/olmo", 8, ("gpu-01",), 8, "python train.py",
        posix_user="rita", uid=uid, gid=gid,
    )  # fmt: skip


def pod(manifest: dict) -> dict:
    return manifest["spec"]["template"]["spec"]


def test_a_pod_runs_as_its_owners_uid_and_gid_never_root_and_without_a_token():
    pod_spec = pod(job_manifest(spec(), "alpha", "allot-jobs", "busybox", "nvidia.com/gpu"))
    assert pod_spec["automountServiceAccountToken"] is False
    assert pod_spec["enableServiceLinks"] is False
    context = pod_spec["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["runAsNonRoot"]) == (
        5001,
        5000,
        True,
    )
    container = pod_spec["containers"][0]["securityContext"]
    assert container["allowPrivilegeEscalation"] is False
    assert container["capabilities"] == {"drop": ["ALL"]}


def test_without_ids_the_pod_still_may_not_run_as_root_and_uid_0_is_refused():
    context = pod(job_manifest(spec(None, None), "a", "n", "busybox", "g"))["securityContext"]
    assert context["runAsNonRoot"] is True and "runAsUser" not in context
    with pytest.raises(BackendError, match="root"):
        job_manifest(spec(0, 0), "a", "n", "busybox", "g")


def documents(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def test_jobs_go_to_a_namespace_apart_from_allots_token_secret():
    backend = KubernetesBackend("alpha", {"host": "https://k8s.invalid"})
    secrets = {d["metadata"]["namespace"] for d in documents("rbac.yaml") if d["kind"] == "Secret"}
    assert backend.namespace == "allot-jobs"
    assert backend.namespace not in secrets


def test_the_shipped_network_policy_confines_the_job_namespace():
    (policy,) = documents("network-policy.yaml")
    assert policy["kind"] == "NetworkPolicy"
    assert policy["metadata"]["namespace"] == "allot-jobs"
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    outside = [rule for rule in policy["spec"]["egress"] if "ipBlock" in rule["to"][0]]
    assert "10.0.0.0/8" in outside[0]["to"][0]["ipBlock"]["except"]
    assert "169.254.0.0/16" in outside[0]["to"][0]["ipBlock"]["except"]
