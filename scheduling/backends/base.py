"""The one interface every cluster backend implements (slurm, kubernetes, simulated).

Backends sit at the edge: they translate between Allot's plain objects below and the outside
world (``sbatch`` arguments, ``squeue`` output, Kubernetes Job manifests). They know nothing of
the database; the scheduling services call them with these dataclasses and persist the results.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from enum import StrEnum


class BackendError(Exception):
    """The backend refused a request or could not be reached."""


class BackendUnavailable(BackendError):
    """The backend did not answer (timeout, connection refused): retry later with backoff."""


@dataclass(frozen=True)
class NodeInfo:
    name: str
    gpus: int
    gpu_type: str
    drained: bool = False
    reason: str = ""


@dataclass(frozen=True)
class LaunchSpec:
    """What the engine decided to start: one Allot job on named nodes."""

    job_id: int  # Allot's job id, carried in the backend's tags so retries find it
    attempt_key: str  # unique per start: a retry with the same key must not launch twice
    name: str
    user: str
    project: str  # budget path, e.g. "nlp/olmo"; "" for unfunded
    gpus: int
    nodes: tuple[str, ...]
    gpus_per_node: int
    command: str
    time_limit_s: int | None = None
    sim_duration_s: int | None = None  # simulated backend only
    # The owner's POSIX account the job runs as (Slurm: sudo -u; Kubernetes: runAsUser and
    # runAsGroup). Empty only where a backend runs jobs as its own user (simulated, tests).
    posix_user: str = ""
    uid: int | None = None
    gid: int | None = None
    # What the job declares (scheduling.job_env, already checked): NAME → value, seen by the
    # job besides the scheduler's own variables and never the worker's.
    env: dict[str, str] = field(default_factory=dict, hash=False)


class RemoteState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"  # stopped by us, can be started again
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class RemoteJob:
    job_id: int  # Allot's id, recovered from the backend's tag
    external_id: str  # the backend's own id (Slurm job id, Kubernetes Job name)
    attempt_key: str
    state: RemoteState
    nodes: tuple[str, ...] = ()
    exit_code: int | None = None
    gpu_utilization: float | None = None  # 0..1 where the backend can tell
    ended_at: float | None = None  # epoch seconds the attempt ended, where the backend knows
    started_at: float | None = None  # epoch seconds it really started (Slurm StartTime, a pod's)
    extra: dict = field(default_factory=dict)


class Backend(abc.ABC):
    """A cluster backend. Every method may raise BackendUnavailable or BackendError."""

    name: str = "abstract"
    # The key a backend signs its tags with and checks them against (see SlurmBackend); set by
    # get_backend's caller. None only for a backend built bare (parsing tests).
    secret: bytes | None = None

    def __init__(self, cluster_name: str, options: dict[str, str] | None = None):
        self.cluster_name = cluster_name
        self.options = dict(options or {})

    @abc.abstractmethod
    def discover_nodes(self) -> list[NodeInfo]:
        """The cluster's nodes with their GPU count, GPU type and drain flag."""

    @abc.abstractmethod
    def submit(self, spec: LaunchSpec) -> RemoteJob:
        """Launch on exactly spec.nodes. Idempotent: if a job with spec.attempt_key already
        exists in the backend, return it instead of launching a second one."""

    @abc.abstractmethod
    def preempt(self, job_id: int, external_id: str) -> None:
        """Stop a running job so that Allot can start it again later (Allot owns the requeue)."""

    @abc.abstractmethod
    def cancel(self, job_id: int, external_id: str) -> None:
        """Stop a job for good. Unknown ids are not an error."""

    @abc.abstractmethod
    def sync(self) -> list[RemoteJob]:
        """Every Allot-tagged job the backend knows, with its state."""

    def access_warnings(self) -> list[str]:
        """Ways to reach the cluster's GPUs without Allot, in words for the operator who
        registers it (Slurm: a governed partition open to direct sbatch)."""
        return []

    def drain_node(self, node: str, reason: str) -> None:  # noqa: B027 - optional
        """Mirror an Allot drain to the backend (Slurm drain, Kubernetes cordon)."""

    def undrain_node(self, node: str) -> None:  # noqa: B027 - optional
        """Undo drain_node."""


_REGISTRY: dict[str, str] = {
    "simulated": "scheduling.backends.simulated.SimulatedBackend",
    "slurm": "scheduling.backends.slurm.SlurmBackend",
    "kubernetes": "scheduling.backends.kubernetes.KubernetesBackend",
}


def backend_names() -> list[str]:
    return sorted(_REGISTRY)


def get_backend(
    kind: str,
    cluster_name: str,
    options: dict[str, str] | None = None,
    secret: bytes | None = None,
) -> Backend:
    import importlib

    try:
        dotted = _REGISTRY[kind]
    except KeyError:
        raise BackendError(
            f"backend: unknown backend {kind!r}; choose one of {', '.join(backend_names())}"
        ) from None
    module_name, class_name = dotted.rsplit(".", 1)
    cls = getattr(importlib.import_module(module_name), class_name)
    backend = cls(cluster_name, options)
    backend.secret = secret
    return backend
