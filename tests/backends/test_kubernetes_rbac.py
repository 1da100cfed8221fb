"""deploy/kubernetes/rbac.yaml grants exactly what the adapter uses: no less, no more."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from scheduling.backends.base import LaunchSpec
from scheduling.backends.kubernetes import KubernetesBackend
from tests.backends.k8s_fake import fake_api_fixture  # noqa: F401 - the fixture is used by name

pytestmark = pytest.mark.kubernetes

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "rbac.yaml"
VERBS = {"POST": "create", "PATCH": "patch", "DELETE": "delete"}


def documents() -> list[dict]:
    return [doc for doc in yaml.safe_load_all(MANIFEST.read_text()) if doc]


def granted() -> set[tuple[str, str, str, str]]:
    """(scope, apiGroup, resource, verb) for every rule bound to the allot service account."""
    docs = documents()
    bound = {
        (doc["roleRef"]["kind"], doc["roleRef"]["name"])
        for doc in docs
        if doc["kind"] in {"RoleBinding", "ClusterRoleBinding"}
        and {"kind": "ServiceAccount", "name": "allot", "namespace": "allot"} in doc["subjects"]
    }
    grants = set()
    for doc in docs:
        if (doc["kind"], doc["metadata"]["name"]) not in bound:
            continue
        scope = doc["metadata"]["namespace"] if doc["kind"] == "Role" else "cluster"
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    grants |= {(scope, group, resource, verb) for verb in rule["verbs"]}
    return grants


def used(requests: list[dict]) -> set[tuple[str, str, str, str]]:
    uses = set()
    for request in requests:
        path = request["path"]
        m = re.match(
            r"^/(?:api|apis/(?P<group>[^/]+))/v1(?:/namespaces/(?P<ns>[^/]+))?/"
            r"(?P<resource>[^/]+)(?P<item>/[^/]+)?$",
            path,
        )
        assert m, path
        verb = VERBS.get(request["method"]) or ("get" if m["item"] else "list")
        uses.add((m["ns"] or "cluster", m["group"] or "", m["resource"], verb))
    return uses


def spec(attempt: str, nodes=("gpu-01",)) -> LaunchSpec:
    return LaunchSpec(7, attempt, "train", "rita", "nlp/olmo", 8, nodes, 8, "true")


def test_the_rbac_manifest_grants_exactly_the_calls_the_adapter_makes(fake_api):
    backend = KubernetesBackend("alpha", {"host": fake_api.url})
    backend.discover_nodes()
    first = backend.submit(spec("7-1"))
    backend.submit(spec("7-1"))
    backend.preempt(7, first.external_id)
    second = backend.submit(spec("7-2", nodes=("gpu-02",)))
    backend.sync()
    backend.drain_node("gpu-03", "maintenance")
    backend.undrain_node("gpu-03")
    backend.cancel(7, second.external_id)

    assert used(fake_api.requests) == granted()


def test_the_rbac_manifest_binds_the_service_account_and_creates_its_token():
    kinds = {(doc["kind"], doc["metadata"]["name"]) for doc in documents()}

    assert ("ServiceAccount", "allot") in kinds
    assert ("Secret", "allot-token") in kinds
    assert {("Role", "allot-jobs"), ("ClusterRole", "allot-nodes")} <= kinds
    assert {("RoleBinding", "allot-jobs"), ("ClusterRoleBinding", "allot-nodes")} <= kinds
