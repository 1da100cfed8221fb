"""A local fake of the Kubernetes HTTP API: just the part the Allot adapter uses.

No API server can run in CI, so the adapter is tested against this: a real HTTP server on
127.0.0.1 (stdlib ``http.server`` in a thread) that the official client talks to unmodified.
It is strict where the real API server is strict, because a fake that accepts anything proves
nothing: malformed names, non-integer GPU quantities, missing containers, unknown patch content
types, duplicate names and unknown objects come back as the same ``Status`` bodies and codes a
kube-apiserver sends. It also plays the Job controller and the scheduler in a few lines: an
unsuspended Job gets Running pods on the nodes its required affinity allows (one per node when
it carries pod anti-affinity, never past a node's allocatable GPUs, never on a cordoned node),
suspending deletes them, and ``complete_job``/``fail_job`` finish a Job as the kubelet would.
NetworkPolicies are stored, validated and garbage-collected with the Job that owns them, and
``reachable`` says who may reach whom under them (k8s_fake_netpol).

Outages: ``outage = "503"`` answers every request with 503, ``"hang"`` never answers (the client
times out), ``"drop"`` closes the connection without a response; ``stop()`` refuses connections.
``kubelet_paused`` leaves bound pods unstarted (an image pull) until ``start_pods``.

The state and the controller are here; what objects must look like (and the errors for those
that do not) in ``k8s_fake_rules``; the routes and their answers in ``k8s_fake_http``.
"""

from __future__ import annotations

import copy
import secrets
import threading
import uuid
from http.server import ThreadingHTTPServer

import pytest

from tests.backends.k8s_fake_http import Handler
from tests.backends.k8s_fake_netpol import reachable
from tests.backends.k8s_fake_rules import (  # noqa: F401 - DNS_LABEL, LABEL_VALUE: for the tests
    DNS_LABEL,
    GPU,
    LABEL_VALUE,
    finished,
    node_matches,
    now,
    parse_selector,
)


class FakeKubernetes:
    """The API server's state plus a tiny Job controller and scheduler."""

    def __init__(self, namespaces=("allot", "allot-jobs"), token: str | None = None):
        self.namespaces = set(namespaces)
        self.token = token
        self.nodes: dict[str, dict] = {}
        self.jobs: dict[tuple[str, str], dict] = {}
        self.pods: dict[tuple[str, str], dict] = {}
        self.network_policies: dict[tuple[str, str], dict] = {}
        self.requests: list[dict] = []
        self.outage: str | None = None
        self.kubelet_paused = False  # pods stay bound but unstarted until start_pods()
        self.lock = threading.RLock()
        self.release = threading.Event()
        self._rv = 0
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> FakeKubernetes:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.fake = self  # type: ignore[attr-defined]
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self.release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    # -- test helpers -----------------------------------------------------------------------------
    def add_node(
        self,
        name,
        gpus=8,
        gpu_type="NVIDIA-H100-80GB-HBM3",
        unschedulable=False,
        ready=True,
        label="nvidia.com/gpu.product",
        labels=None,
    ) -> dict:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "uid": str(uuid.uuid4()),
                "resourceVersion": self.next_rv(),
                "creationTimestamp": now(),
                "annotations": {},
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    **({label: gpu_type} if gpu_type else {}),
                    **(labels or {}),
                },
            },
            "spec": {"unschedulable": True} if unschedulable else {},
            "status": {
                "capacity": {"cpu": "64", "memory": "512Gi", GPU: str(gpus)},
                "allocatable": {"cpu": "63", "memory": "500Gi", GPU: str(gpus)},
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if ready else "False",
                        "reason": "KubeletReady" if ready else "NodeNotReady",
                    }
                ],
            },
        }
        with self.lock:
            self.nodes[name] = node
        return node

    def add_network_policy(self, policy: dict) -> None:
        """A policy an operator applied with kubectl (the shipped network-policy.yaml)."""
        meta = policy["metadata"]
        with self.lock:
            self.network_policies[(meta["namespace"], meta["name"])] = copy.deepcopy(policy)

    def reachable(self, source: dict, target: dict) -> bool:
        """Whether pod ``source`` may connect to pod ``target`` under the policies held, as a
        CNI that enforces NetworkPolicy decides (k8s_fake_netpol)."""
        with self.lock:
            return reachable(list(self.network_policies.values()), source, target)

    def job(self, name: str, namespace: str = "allot-jobs") -> dict:
        return self.jobs[(namespace, name)]

    def pods_of(self, name: str, namespace: str = "allot-jobs") -> list[dict]:
        with self.lock:
            return sorted(
                (
                    p
                    for (ns, _), p in self.pods.items()
                    if ns == namespace and p["metadata"]["labels"].get("job-name") == name
                ),
                key=lambda p: p["metadata"]["name"],
            )

    def complete_job(self, name: str, namespace: str = "allot-jobs") -> None:
        self._finish(name, namespace, "Complete", exit_code=0)

    def fail_job(self, name: str, exit_code: int = 1, namespace: str = "allot-jobs") -> None:
        self._finish(name, namespace, "Failed", exit_code=exit_code)

    def _finish(self, name, namespace, condition, exit_code):
        with self.lock:
            job, pods = self.job(name, namespace), self.pods_of(name, namespace)
            for pod in pods:
                pod["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"
                for cs in pod["status"].get("containerStatuses", []):
                    cs["state"] = {
                        "terminated": {
                            "exitCode": exit_code,
                            "finishedAt": now(),
                            "reason": "Completed" if not exit_code else "Error",
                        }
                    }
            status = job["status"]
            status["active"], status["ready"] = 0, 0
            status["succeeded" if condition == "Complete" else "failed"] = len(pods) or 1
            status["completionTime"] = now()
            reason = "CompletionsReached" if condition == "Complete" else "BackoffLimitExceeded"
            status.setdefault("conditions", []).append(
                {
                    "type": condition,
                    "status": "True",
                    "reason": reason,
                    "message": "Reached expected number of succeeded pods"
                    if condition == "Complete"
                    else "Job has reached the specified backoff limit",
                    "lastTransitionTime": now(),
                }
            )

    # -- the controller and scheduler -------------------------------------------------------------
    def reconcile(self) -> None:
        for job in list(self.jobs.values()):
            self._reconcile_job(job)
        for pod in self.pods.values():
            if pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName"):
                self._schedule(pod)

    def _set_condition(self, job, kind, status, reason):
        conditions = job["status"].setdefault("conditions", [])
        conditions[:] = [c for c in conditions if c["type"] != kind]
        conditions.append(
            {"type": kind, "status": status, "reason": reason, "lastTransitionTime": now()}
        )

    def _reconcile_job(self, job) -> None:
        meta, spec, status = job["metadata"], job["spec"], job.setdefault("status", {})
        ns, name = meta["namespace"], meta["name"]
        if finished(job):
            return
        pods = self.pods_of(name, ns)
        if spec.get("suspend"):
            for pod in pods:
                del self.pods[(ns, pod["metadata"]["name"])]
            status["active"], status["ready"] = 0, 0
            status.pop("startTime", None)
            self._set_condition(job, "Suspended", "True", "JobSuspended")
            return
        if any(
            c["type"] == "Suspended" and c["status"] == "True" for c in status.get("conditions", [])
        ):
            self._set_condition(job, "Suspended", "False", "JobResumed")
        status.setdefault("startTime", now())
        for index in range(len(pods), spec.get("parallelism", 1)):
            pod = self._new_pod(job, index)
            self.pods[(ns, pod["metadata"]["name"])] = pod
            self._schedule(pod)
        pods = self.pods_of(name, ns)
        status["active"] = len(pods)
        status["ready"] = sum(p["status"]["phase"] == "Running" for p in pods)

    def _new_pod(self, job, index) -> dict:
        meta, template = job["metadata"], job["spec"]["template"]
        labels = {
            **(template.get("metadata", {}).get("labels") or {}),
            "job-name": meta["name"],
            "batch.kubernetes.io/job-name": meta["name"],
            "controller-uid": meta["uid"],
            "batch.kubernetes.io/controller-uid": meta["uid"],
            "batch.kubernetes.io/job-completion-index": str(index),
        }
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{meta['name']}-{index}-{secrets.token_hex(3)[:5]}",
                "namespace": meta["namespace"],
                "uid": str(uuid.uuid4()),
                "labels": labels,
                "creationTimestamp": now(),
                "resourceVersion": self.next_rv(),
                "annotations": dict(template.get("metadata", {}).get("annotations") or {}),
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": copy.deepcopy(template["spec"]),
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ],
            },
        }

    def _gpu_request(self, pod) -> int:
        return sum(
            int((c.get("resources") or {}).get("limits", {}).get(GPU, 0))
            for c in pod["spec"]["containers"]
        )

    def _schedule(self, pod) -> None:
        """Bind to the first node the required affinity allows that is schedulable, has the
        GPUs free and holds no pod the anti-affinity excludes."""
        affinity = pod["spec"].get("affinity") or {}
        terms = (
            (affinity.get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
            or {}
        ).get("nodeSelectorTerms") or [{}]
        anti = (affinity.get("podAntiAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or []
        bound = [
            p
            for p in self.pods.values()
            if p["spec"].get("nodeName") and p["status"]["phase"] in {"Pending", "Running"}
        ]
        for name in sorted(self.nodes):
            node = self.nodes[name]
            if node["spec"].get("unschedulable") or not any(node_matches(node, t) for t in terms):
                continue
            here = [p for p in bound if p["spec"]["nodeName"] == name]
            free = int(node["status"]["allocatable"].get(GPU, "0")) - sum(
                self._gpu_request(p) for p in here
            )
            if free < self._gpu_request(pod):
                continue
            if any(
                parse_selector(
                    ",".join(f"{k}={v}" for k, v in term["labelSelector"]["matchLabels"].items())
                )(p["metadata"]["labels"])
                for term in anti
                for p in here
            ):
                continue
            pod["spec"]["nodeName"] = name
            if self.kubelet_paused:  # bound, but the kubelet has not taken it up yet
                pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
                return
            self._run_pod(pod)
            return

    def _run_pod(self, pod) -> None:
        """What the kubelet reports once it has started a bound pod."""
        pod["status"] = {
            "phase": "Running",
            "hostIP": "10.0.0.1",
            "podIP": "10.1.0.1",
            "startTime": now(),
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c["image"],
                    "imageID": "",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now()}},
                }
                for c in pod["spec"]["containers"]
            ],
        }

    def start_pods(self, name: str, namespace: str = "allot-jobs") -> None:
        """The kubelet (paused with ``kubelet_paused``) starts the bound pods of Job ``name``
        now, as after a slow image pull."""
        with self.lock:
            for pod in self.pods_of(name, namespace):
                if pod["spec"].get("nodeName") and not pod["status"].get("startTime"):
                    self._run_pod(pod)


# -- fixtures (import them into a test module to use them)
@pytest.fixture(name="fake_api")
def fake_api_fixture():
    """A running fake with three GPU nodes and one CPU-only node."""
    fake = FakeKubernetes().start()
    fake.add_node("gpu-01")
    fake.add_node("gpu-02")
    fake.add_node("gpu-03", gpus=4, gpu_type="NVIDIA-A100-SXM4-40GB")
    fake.add_node("cpu-01", gpus=0, gpu_type="")
    yield fake
    fake.stop()
