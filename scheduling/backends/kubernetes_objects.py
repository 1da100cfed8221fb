"""Kubernetes objects for the Kubernetes backend, as plain JSON: the Job manifest Allot creates,
and the mapping of Jobs, Pods and Nodes back to Allot's RemoteJob and NodeInfo.

Pure functions on the API's own field names, so they are testable without a server or the
client's model classes.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime

from .base import BackendError, LaunchSpec, NodeInfo, RemoteJob, RemoteState

LABEL_JOB = "allot.dev/job-id"
LABEL_ATTEMPT = "allot.dev/attempt"
LABEL_CLUSTER = "allot.dev/cluster"
ANN_ATTEMPT_KEY = "allot.dev/attempt-key"
ANN_PROJECT = "allot.dev/project"
ANN_USER = "allot.dev/user"
ANN_NAME = "allot.dev/name"
ANN_PREEMPTED = "allot.dev/preempted-at"
ANN_DRAIN_REASON = "allot.dev/drain-reason"
HOSTNAME = "kubernetes.io/hostname"
MERGE_PATCH = "application/merge-patch+json"


def label_value(text: str) -> str:
    """A valid label value (<= 63 chars, alphanumeric ends, ``-_.`` inside) that stays
    unique: when the text had to be changed, a short hash of the original is appended."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")
    if safe == text and len(safe) <= 63:
        return safe
    digest = hashlib.sha1(text.encode()).hexdigest()[:8]
    return f"{safe[:54].rstrip('-_.')}-{digest}".lstrip("-")


def job_name(job_id: int, attempt_key: str) -> str:
    """A DNS-1123 label (Job names become pod labels, so 63 characters at most), the same
    for the same attempt so a retried create collides instead of duplicating."""
    slug = re.sub(r"[^a-z0-9-]+", "-", attempt_key.lower()).strip("-")
    name = f"allot-{job_id}-{slug}".rstrip("-")
    if slug == attempt_key and len(name) <= 63:
        return name
    digest = hashlib.sha1(attempt_key.encode()).hexdigest()[:8]
    return f"{name[:54].rstrip('-')}-{digest}"


def pod_security(spec: LaunchSpec) -> dict:
    """The pod runs as its owner's POSIX uid and gid (the portal refuses Kubernetes jobs from
    users without them), never as root: without ids the image's own non-root user is required,
    and the kubelet refuses an image that would run as root."""
    context: dict = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    if spec.uid is not None:
        if spec.uid == 0 or spec.gid == 0:
            raise BackendError(f"kubernetes: job {spec.job_id} would run as root; refused")
        context.update(runAsUser=spec.uid, runAsGroup=spec.gid, fsGroup=spec.gid)
    return context


def job_env(spec: LaunchSpec, count: int) -> list[dict]:
    """The container's whole environment besides the image's: the job's shape, as Slurm gives
    its jobs ``SLURM_JOB_NODELIST`` and ``SLURM_NNODES`` (the rank is the controller's
    ``JOB_COMPLETION_INDEX``), then what the job declares. Nothing of Allot's bookkeeping —
    job id and attempt key live in labels and annotations, which sync and adoption read — and
    nothing of the worker's environment."""
    env = [
        {"name": "ALLOT_NODES", "value": ",".join(spec.nodes)},
        {"name": "ALLOT_NUM_NODES", "value": str(count)},
    ]
    for name, value in spec.env.items():
        if name.upper().startswith("ALLOT_"):  # refused at submission; never trusted here
            raise BackendError(f"kubernetes: job {spec.job_id}: env: {name} is reserved")
        env.append({"name": name, "value": value})
    return env


def job_manifest(
    spec: LaunchSpec, cluster_name: str, namespace: str, image: str, gpu_resource: str
) -> dict:
    """The batch/v1 Job for one start, created suspended."""
    labels = {
        LABEL_JOB: str(spec.job_id),
        LABEL_ATTEMPT: label_value(spec.attempt_key),
        LABEL_CLUSTER: label_value(cluster_name),
        "app.kubernetes.io/managed-by": "allot",
    }
    annotations = {
        ANN_ATTEMPT_KEY: spec.attempt_key,
        ANN_PROJECT: spec.project,
        ANN_USER: spec.user,
        ANN_NAME: spec.name,
    }
    count = max(len(spec.nodes), 1)
    resources = {}
    tolerations = []
    if spec.gpus_per_node:
        quantity = {gpu_resource: str(spec.gpus_per_node)}
        resources = {"requests": dict(quantity), "limits": dict(quantity)}
        # GPU nodes are commonly tainted so that only GPU work lands there.
        tolerations = [{"key": gpu_resource, "operator": "Exists", "effect": "NoSchedule"}]
    affinity: dict = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": HOSTNAME, "operator": "In", "values": list(spec.nodes)}
                        ]
                    }
                ]
            }
        }
    }
    name = job_name(spec.job_id, spec.attempt_key)
    if count > 1:  # one pod per chosen node, not two pods sharing one node's GPUs
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {
                        "matchLabels": {
                            LABEL_ATTEMPT: labels[LABEL_ATTEMPT],
                            LABEL_JOB: labels[LABEL_JOB],
                        }
                    },
                    "topologyKey": HOSTNAME,
                }
            ]
        }
    env = job_env(spec, count)
    job_spec: dict = {
        "suspend": True,
        "parallelism": count,
        "completions": count,
        "completionMode": "Indexed",  # each pod gets JOB_COMPLETION_INDEX as its rank
        "backoffLimit": 0,  # Allot decides about retries, not the Job controller
        "template": {
            "metadata": {"labels": dict(labels), "annotations": dict(annotations)},
            "spec": {
                "restartPolicy": "Never",
                "affinity": affinity,
                "tolerations": tolerations,
                # Someone else's code: no API token, no service links, the owner's ids.
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                "securityContext": pod_security(spec),
                "containers": [
                    {
                        "name": "job",
                        "image": image,
                        "command": ["/bin/sh", "-c", spec.command],
                        "env": env,
                        "resources": resources,
                        "securityContext": {
                            "runAsNonRoot": True,
                            "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]},
                        },
                    }
                ],
            },
        },
    }
    if spec.time_limit_s:
        job_spec["activeDeadlineSeconds"] = int(spec.time_limit_s)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": job_spec,
    }


def network_policy(job: dict) -> dict:
    """The NetworkPolicy of one start, made from its created Job: the Job's pods admit
    traffic only from each other (a multi-node job's rendezvous and NCCL), so no job of
    another project — nor another job of the same one, nor an unfunded job of anyone — can
    open a connection to them. It is owned by the Job (an owner reference, without
    ``blockOwnerDeletion``, which would need rights on the Job's finalizers), so the garbage
    collector deletes it with the Job: on cancel, and when a new attempt replaces the Job."""
    meta = job["metadata"]
    labels = meta.get("labels") or {}
    own = {key: labels[key] for key in (LABEL_CLUSTER, LABEL_JOB, LABEL_ATTEMPT)}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": dict(labels),
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"]}
            ],
        },
        "spec": {
            "podSelector": {"matchLabels": own},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": own}}]}],
        },
    }


def _condition(job: dict, kind: str) -> dict | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return cond
    return None


def _exit_code(pods: list[dict]) -> int | None:
    codes = [
        cs["state"]["terminated"].get("exitCode")
        for pod in pods
        for cs in (pod.get("status") or {}).get("containerStatuses") or []
        if (cs.get("state") or {}).get("terminated")
    ]
    nonzero = [c for c in codes if c]
    return nonzero[0] if nonzero else (codes[0] if codes else None)


def _timestamp(text: str | None) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp() if text else None
    except (TypeError, ValueError):
        return None


def _pod_start(pod: dict) -> float | None:
    """When the kubelet started the pod (``status.startTime``: it holds the node's GPUs from
    then, as Slurm's StartTime is the allocation), else when its container started."""
    status = pod.get("status") or {}
    started = _timestamp(status.get("startTime"))
    if started is not None:
        return started
    running = [
        _timestamp(((cs.get("state") or {}).get("running") or {}).get("startedAt"))
        for cs in status.get("containerStatuses") or []
    ]
    return max((t for t in running if t is not None), default=None)


def started_at(job: dict, pods: list[dict]) -> float | None:
    """When the attempt really started: once every pod it needs has started, the latest of
    their starts (a multi-node job runs when its last rank does); None before that, or when
    the pods are gone (a suspended Job), so nothing is claimed that the API does not show."""
    wanted = int((job.get("spec") or {}).get("parallelism") or 1)
    starts = [t for t in (_pod_start(p) for p in pods) if t is not None]
    return max(starts) if starts and len(starts) >= wanted else None


def ended_at(job: dict, pods: list[dict], finished: dict | None) -> float | None:
    """When a finished attempt really ended, however late Allot hears of it: the last
    container's ``state.terminated.finishedAt`` (its pods hold the GPUs until then), else the
    Job's ``status.completionTime``, else when its finished condition turned true. None for a
    Job that has not finished."""
    if finished is None:
        return None
    ends = [
        _timestamp(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for pod in pods
        for cs in (pod.get("status") or {}).get("containerStatuses") or []
    ]
    known = [t for t in ends if t is not None]
    if known:
        return max(known)
    status = job.get("status") or {}
    return _timestamp(status.get("completionTime")) or _timestamp(
        finished.get("lastTransitionTime")
    )


def remote_job(job: dict, pods: list[dict]) -> RemoteJob:
    """Map one Job and its pods to Allot's view.

    Finished conditions win; a suspended Job is PREEMPTED when Allot suspended it (annotation)
    and PENDING when its start was never completed; an unsuspended one is RUNNING once a pod
    is bound to a node and PENDING before that (the scheduler has not placed it yet).
    """
    meta, spec = job.get("metadata") or {}, job.get("spec") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    bound = sorted(
        {
            p["spec"]["nodeName"]
            for p in pods
            if (p.get("spec") or {}).get("nodeName")
            and (p.get("status") or {}).get("phase") in {"Pending", "Running"}
        }
    )
    extra: dict = {"namespace": meta.get("namespace", ""), "pods": len(pods)}
    exit_code, finished = None, None
    if meta.get("deletionTimestamp"):
        state = RemoteState.CANCELLED
    elif done := _condition(job, "Complete"):
        state, exit_code, finished = RemoteState.COMPLETED, 0, done
        extra["reason"] = done.get("reason", "")
    elif failed := _condition(job, "Failed"):
        state, exit_code, finished = RemoteState.FAILED, _exit_code(pods), failed
        extra["reason"] = failed.get("reason", "")
        extra["message"] = failed.get("message", "")
    elif spec.get("suspend"):
        state = RemoteState.PREEMPTED if annotations.get(ANN_PREEMPTED) else RemoteState.PENDING
    elif bound:
        state = RemoteState.RUNNING
    else:
        state = RemoteState.PENDING
    return RemoteJob(
        job_id=int(labels.get(LABEL_JOB, "0")),
        external_id=meta.get("name", ""),
        attempt_key=annotations.get(ANN_ATTEMPT_KEY, labels.get(LABEL_ATTEMPT, "")),
        state=state,
        nodes=tuple(bound),
        exit_code=exit_code,
        started_at=started_at(job, pods),
        ended_at=ended_at(job, pods, finished),
        extra=extra,
    )


def node_info(node: dict, gpu_resource: str, gpu_type_label: str) -> NodeInfo:
    meta, spec, status = node["metadata"], node.get("spec") or {}, node.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    reason = ""
    if spec.get("unschedulable"):
        reason = (meta.get("annotations") or {}).get(ANN_DRAIN_REASON) or "cordoned"
    elif not ready:
        reason = "node not ready"
    return NodeInfo(
        name=meta["name"],
        gpus=int(str((status.get("allocatable") or {}).get(gpu_resource, "0"))),
        gpu_type=(meta.get("labels") or {}).get(gpu_type_label, "") or "unknown",
        drained=bool(reason),
        reason=reason,
    )
