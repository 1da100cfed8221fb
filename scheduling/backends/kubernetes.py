"""Kubernetes backend: one batch/v1 Job per Allot start, controlled through ``spec.suspend``.

This is the Kueue way of running jobs that someone else admits. Allot's engine has already
decided where a job runs, so the adapter:

1. creates the Job suspended (``spec.suspend: true``), labelled with the Allot ids and pinned
   to the chosen nodes by required node affinity on ``kubernetes.io/hostname`` (plus pod
   anti-affinity so a multi-node job gets one pod per node), and beside it a NetworkPolicy
   owned by the Job that admits ingress to its pods only from each other (jobs of other
   projects cannot reach them), so the policy holds before any pod exists;
2. unsuspends it with a merge patch — only then does the Job controller create pods;
3. preempts by suspending it again (the controller deletes the pods; Allot owns the requeue);
4. cancels by deleting it with ``propagationPolicy=Background`` (the API's default for
   batch/v1 Jobs orphans the pods, which would leave GPUs busy);
5. syncs by listing Jobs and Pods by the ``allot.dev/cluster`` label.

Creating suspended first makes a retried start safe: the Job name is derived from the job id
and attempt key, so a second create answers 409 and the adapter picks up the existing Job
instead of launching twice; a crash between create and unsuspend is finished by the retry.

The official ``kubernetes`` client does transport, auth and kubeconfig parsing; responses are
read as plain JSON (``_preload_content=False``) so the mapping (kubernetes_objects.py) works on
the API's own field names and is testable without model objects. The adapter fails fast (no
retries, a short timeout): backoff belongs to the caller, which must not stall a scheduling
pass on an outage.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import UTC, datetime

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from .base import (
    Backend,
    BackendError,
    BackendUnavailable,
    LaunchSpec,
    NodeInfo,
    RemoteJob,
    RemoteState,
)
from .kubernetes_objects import (  # noqa: F401 - part of this module's API
    ANN_ATTEMPT_KEY,
    ANN_DRAIN_REASON,
    ANN_NAME,
    ANN_PREEMPTED,
    ANN_PROJECT,
    ANN_USER,
    HOSTNAME,
    LABEL_ATTEMPT,
    LABEL_CLUSTER,
    LABEL_JOB,
    MERGE_PATCH,
    _condition,
    _exit_code,
    job_manifest,
    job_name,
    label_value,
    network_policy,
    node_info,
    remote_job,
)


class KubernetesRefusal(BackendError):
    """A 4xx answer; ``status`` lets the adapter treat 404 and 409 as the answers they are."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class KubernetesBackend(Backend):
    name = "kubernetes"

    def __init__(self, cluster_name: str, options: dict[str, str] | None = None):
        super().__init__(cluster_name, options)
        opts = self.options
        # Jobs live apart from Allot's own namespace (its service account and token secret).
        self.namespace = opts.get("namespace", "allot-jobs")
        self.image = opts.get("image", "busybox:1.36")
        self.gpu_resource = opts.get("gpu_resource", "nvidia.com/gpu")
        self.gpu_type_label = opts.get("gpu_type_label", "nvidia.com/gpu.product")
        self.node_selector = opts.get("node_selector", "")
        # Off only where the cluster's own policies isolate jobs (docs/kubernetes.md).
        self.isolate_jobs = opts.get("isolate_jobs", "true").lower() not in {"0", "false", "no"}
        try:
            self.timeout = float(opts.get("timeout", 10))
        except ValueError:
            raise BackendError(f"timeout: expected seconds, got {opts['timeout']!r}") from None
        self.cluster_label = label_value(cluster_name)
        self._api: client.ApiClient | None = None

    # -- connection ---------------------------------------------------------------------------
    def _configuration(self) -> client.Configuration:
        opts, cfg = self.options, client.Configuration()
        try:
            if opts.get("kubeconfig"):
                config.load_kube_config(
                    config_file=opts["kubeconfig"],
                    context=opts.get("context") or None,
                    client_configuration=cfg,
                    persist_config=False,
                )
            elif opts.get("host"):
                cfg.host = opts["host"].rstrip("/")
                token = opts.get("token", "")
                if not token and opts.get("token_file"):
                    with open(opts["token_file"]) as handle:
                        token = handle.read().strip()
                if token:
                    cfg.api_key = {"BearerToken": token}
                    cfg.api_key_prefix = {"BearerToken": "Bearer"}
                if opts.get("ca_cert"):
                    cfg.ssl_ca_cert = opts["ca_cert"]
                cfg.verify_ssl = opts.get("verify_ssl", "true").lower() not in {"0", "false", "no"}
            elif opts.get("in_cluster", "").lower() in {"1", "true", "yes"}:
                config.load_incluster_config(client_configuration=cfg)
            else:
                raise BackendError(
                    "kubernetes: set the kubeconfig option, or host and token, or in_cluster=true"
                )
        except BackendError:
            raise
        except Exception as error:  # a broken kubeconfig raises anything from YAML to KeyError
            raise BackendError(
                f"kubernetes: cannot load the connection settings: {error}"
            ) from None
        cfg.retries = 0  # fail fast; the caller retries with backoff
        return cfg

    @property
    def api(self) -> client.ApiClient:
        if self._api is None:
            self._api = client.ApiClient(self._configuration())
        return self._api

    @contextmanager
    def _errors(self, what: str):
        """Timeouts, refused connections and 5xx mean "try later"; other 4xx are refusals,
        reported with the API server's own message."""
        try:
            yield
        except ApiException as error:
            message = error.reason or ""
            try:
                message = json.loads(error.body or "{}").get("message") or message
            except (ValueError, AttributeError):
                pass
            status = error.status or 0
            if status == 0 or status == 429 or status >= 500:
                raise BackendUnavailable(f"kubernetes: {what}: {message} (HTTP {status})") from None
            raise KubernetesRefusal(
                f"kubernetes: {what}: {message} (HTTP {status})", status
            ) from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise BackendUnavailable(
                f"kubernetes: {what}: API server unreachable: {error}"
            ) from None

    def _call(self, what: str, method, *args, **kwargs) -> dict:
        with self._errors(what):
            response = method(
                *args, _preload_content=False, _request_timeout=self.timeout, **kwargs
            )
            return json.loads(response.data or b"{}")

    def _get_job(self, name: str) -> dict | None:
        try:
            return self._call(
                f"get job {name}",
                client.BatchV1Api(self.api).read_namespaced_job,
                name,
                self.namespace,
            )
        except KubernetesRefusal as error:
            if error.status == 404:
                return None
            raise

    def _patch_job(self, name: str, patch: dict) -> dict:
        return self._call(
            f"patch job {name}",
            client.BatchV1Api(self.api).patch_namespaced_job,
            name,
            self.namespace,
            patch,
            _content_type=MERGE_PATCH,
        )

    def _delete_job(self, name: str) -> None:
        try:
            self._call(
                f"delete job {name}",
                client.BatchV1Api(self.api).delete_namespaced_job,
                name,
                self.namespace,
                propagation_policy="Background",
            )
        except KubernetesRefusal as error:
            if error.status != 404:
                raise

    def _list(self, what: str, method, *args, selector: str) -> list[dict]:
        return self._call(what, method, *args, label_selector=selector).get("items") or []

    def _pods(self, selector: str) -> list[dict]:
        return self._list(
            "list pods",
            client.CoreV1Api(self.api).list_namespaced_pod,
            self.namespace,
            selector=selector,
        )

    def _jobs(self, selector: str) -> list[dict]:
        return self._list(
            "list jobs",
            client.BatchV1Api(self.api).list_namespaced_job,
            self.namespace,
            selector=selector,
        )

    def _owned(self, job: dict, job_id: int) -> dict:
        """Refuse to touch a Job that is not this cluster's copy of this Allot job."""
        labels = job["metadata"].get("labels") or {}
        if labels.get(LABEL_JOB) != str(job_id) or labels.get(LABEL_CLUSTER) != self.cluster_label:
            raise BackendError(
                f"kubernetes: job {job['metadata']['name']} does not belong to "
                f"Allot job #{job_id} on {self.cluster_name}"
            )
        return job

    # -- Backend interface ----------------------------------------------------------------------
    def discover_nodes(self) -> list[NodeInfo]:
        """Nodes with allocatable GPUs; a node whose GPUs vanished (device plugin gone)
        drops out, so rediscovery drains it in Allot."""
        items = self._list(
            "list nodes", client.CoreV1Api(self.api).list_node, selector=self.node_selector
        )
        nodes = [node_info(item, self.gpu_resource, self.gpu_type_label) for item in items]
        return [node for node in nodes if node.gpus > 0]

    def submit(self, spec: LaunchSpec) -> RemoteJob:
        if not spec.nodes:
            raise BackendError("nodes: a start needs at least one node")
        manifest = job_manifest(
            spec, self.cluster_name, self.namespace, self.image, self.gpu_resource
        )
        name = manifest["metadata"]["name"]
        job = self._get_job(name)
        if job is None:
            try:
                job = self._call(
                    f"create job {name}",
                    client.BatchV1Api(self.api).create_namespaced_job,
                    self.namespace,
                    client.V1Job.from_dict(manifest),
                )
            except KubernetesRefusal as error:
                if error.status != 409:
                    raise
                job = self._get_job(name)  # a concurrent retry created it first
                if job is None:
                    raise
        self._owned(job, spec.job_id)
        annotations = job["metadata"].get("annotations") or {}
        if job["spec"].get("suspend") and not annotations.get(ANN_PREEMPTED):
            if self.isolate_jobs:  # before any pod exists
                self._isolate(job)
            job = self._patch_job(name, {"spec": {"suspend": False}})
        self._forget_earlier_attempts(spec.job_id, keep=name)
        remote = remote_job(job, [])
        if remote.state == RemoteState.PENDING:  # started: the nodes are Allot's decision
            return RemoteJob(
                remote.job_id,
                remote.external_id,
                remote.attempt_key,
                RemoteState.RUNNING,
                tuple(spec.nodes),
                extra=remote.extra,
            )
        return remote

    def _isolate(self, job: dict) -> None:
        """Create the Job's NetworkPolicy; one already there (a retried start) is its own."""
        name = job["metadata"]["name"]
        try:
            self._call(
                f"create network policy {name}",
                client.NetworkingV1Api(self.api).create_namespaced_network_policy,
                self.namespace,
                network_policy(job),
            )
        except KubernetesRefusal as error:
            if error.status != 409:
                raise

    def _forget_earlier_attempts(self, job_id: int, keep: str) -> None:
        """A restarted job gets a fresh Job (new nodes, new attempt); the suspended Jobs of
        its earlier attempts would only clutter sync, so they go."""
        selector = f"{LABEL_CLUSTER}={self.cluster_label},{LABEL_JOB}={job_id}"
        for job in self._jobs(selector):
            if job["metadata"]["name"] != keep and job["spec"].get("suspend"):
                self._delete_job(job["metadata"]["name"])

    def preempt(self, job_id: int, external_id: str) -> None:
        """Suspend: the Job controller deletes the pods and the Job stays as the record.
        A Job that is already gone is not running, which is what preempting wants."""
        job = self._get_job(external_id)
        if job is None or _condition(job, "Complete") or _condition(job, "Failed"):
            return
        self._owned(job, job_id)
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._patch_job(
            external_id,
            {"spec": {"suspend": True}, "metadata": {"annotations": {ANN_PREEMPTED: stamp}}},
        )

    def cancel(self, job_id: int, external_id: str) -> None:
        """Delete the Job (and every other attempt of the same Allot job) with its pods."""
        names = {external_id} if external_id else set()
        selector = f"{LABEL_CLUSTER}={self.cluster_label},{LABEL_JOB}={job_id}"
        names |= {job["metadata"]["name"] for job in self._jobs(selector)}
        for name in sorted(names):
            job = self._get_job(name)
            if job is not None:
                self._owned(job, job_id)
                self._delete_job(name)

    def sync(self) -> list[RemoteJob]:
        selector = f"{LABEL_CLUSTER}={self.cluster_label}"
        jobs = self._jobs(selector)
        pods_by_job: dict[str, list[dict]] = {}
        for pod in self._pods(selector):
            owner = (pod["metadata"].get("labels") or {}).get(
                "batch.kubernetes.io/job-name"
            ) or pod["metadata"]["labels"].get("job-name", "")
            pods_by_job.setdefault(owner, []).append(pod)
        return [remote_job(job, pods_by_job.get(job["metadata"]["name"], [])) for job in jobs]

    def drain_node(self, node: str, reason: str) -> None:
        """Cordon, keeping Allot's reason in an annotation (Kubernetes has no reason field)."""
        self._patch_node(
            node,
            {
                "spec": {"unschedulable": True},
                "metadata": {"annotations": {ANN_DRAIN_REASON: reason or "drained in Allot"}},
            },
        )

    def undrain_node(self, node: str) -> None:
        self._patch_node(
            node,
            {
                "spec": {"unschedulable": None},
                "metadata": {"annotations": {ANN_DRAIN_REASON: None}},
            },
        )

    def _patch_node(self, node: str, patch: dict) -> None:
        self._call(
            f"patch node {node}",
            client.CoreV1Api(self.api).patch_node,
            node,
            patch,
            _content_type="application/strategic-merge-patch+json",
        )
