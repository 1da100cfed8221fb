"""Registering a cluster and (re)discovering its nodes from the backend."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from scheduling.backends.base import BackendError, get_backend
from scheduling.backends.ssh import SSH_FILE_OPTIONS, ssh_options, ssh_prefix
from scheduling.errors import JobValidationError
from scheduling.models import Cluster, Node


@dataclass
class DiscoveryReport:
    cluster: Cluster
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    unpriced: list[str] = field(default_factory=list)  # GPU types with no cost factor
    # ways around Allot to the cluster's GPUs (a Slurm partition open to direct sbatch)
    warnings: list[str] = field(default_factory=list)

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes if n.present)


def parse_options(pairs: list[str]) -> dict[str, str]:
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise JobValidationError("option", f"expected KEY=VALUE, got {pair!r}")
        options[key.strip()] = value.strip()
    return options


# Options naming a file Allot's worker reads (credentials, configuration): only inside
# ALLOT_CLUSTER_FILES_DIR, so an admin form cannot point a backend at any file of the host
# (and send it to a host of their choice).
FILE_OPTIONS = ("kubeconfig", "token_file", "ca_cert", "slurm_conf", *SSH_FILE_OPTIONS)


def cluster_files_dir() -> Path:
    configured = getattr(settings, "ALLOT_CLUSTER_FILES_DIR", None)
    return Path(configured or os.environ.get("ALLOT_CLUSTER_FILES_DIR") or "/etc/allot")


def check_options(backend: str, options: dict) -> None:
    """Refuse options that would make the worker read any file or run any program: file
    options must resolve inside the configured directory (symlinks and ``..`` resolved), and
    ssh is described by structured options, never a free-text command."""
    if backend not in Cluster.Backend.values:
        raise JobValidationError(
            "backend", f"backend must be one of {', '.join(Cluster.Backend.values)}"
        )
    if not isinstance(options, dict):
        raise JobValidationError("options", "options must be an object of KEY: VALUE")
    base = cluster_files_dir().resolve()
    for key in FILE_OPTIONS:
        value = options.get(key)
        if value in (None, ""):
            continue
        path = Path(str(value))
        if not path.is_absolute() or not path.resolve().is_relative_to(base):
            raise JobValidationError(
                "options", f"{key} must be a file inside {base} (ALLOT_CLUSTER_FILES_DIR)"
            )
    # The simulated backend writes its state there: Allot's var directory or the one above.
    state_dir = options.get("state_dir")
    if state_dir not in (None, ""):
        path = Path(str(state_dir)).resolve()
        allowed = (base, Path(settings.VAR_DIR).resolve())
        if not Path(str(state_dir)).is_absolute() or not any(
            path.is_relative_to(d) for d in allowed
        ):
            raise JobValidationError(
                "options", f"state_dir must be a directory inside {base} or {allowed[1]}"
            )
    # The worker runs ssh, built in code from these options (scheduling/backends/ssh.py): no
    # free-text program or ssh option. A legacy command_prefix must be plain ssh.
    try:
        ssh_prefix(options)
    except BackendError as exc:
        raise JobValidationError("options", str(exc)) from exc
    legacy = ssh_options(options).get("ssh_key") if options.get("command_prefix") else None
    if legacy and not Path(legacy).resolve().is_relative_to(base):
        raise JobValidationError(
            "options", f"ssh_key must be a file inside {base} (ALLOT_CLUSTER_FILES_DIR)"
        )


def register_cluster(
    name: str,
    backend: str,
    options: dict[str, str],
    prices: dict[str, Decimal] | None = None,
    actor=None,
) -> DiscoveryReport:
    """Create or update the cluster, price the GPU types in ``prices`` (through the audited
    budget service), then discover its nodes: priced first, so their nodes are not drained.
    Nothing is saved if the backend cannot be reached or a price is refused."""
    from budgets.services import set_gpu_price

    check_options(backend, options)
    try:
        adapter = get_backend(backend, name, options)
        discovered = adapter.discover_nodes()
    except BackendError as exc:
        raise JobValidationError("backend", f"cannot discover nodes: {exc}") from exc
    if not discovered:
        raise JobValidationError("backend", "the backend reports no nodes")
    try:  # advice for the operator: never a reason to refuse the cluster
        warnings = adapter.access_warnings()
    except BackendError as exc:
        warnings = [f"cannot check who else may use the cluster: {exc}"]
    with transaction.atomic():
        for gpu_type, factor in (prices or {}).items():
            set_gpu_price(actor, gpu_type, factor, reason=f"registering cluster {name}")
        cluster, _ = Cluster.objects.update_or_create(
            name=name, defaults={"backend": backend, "options": options}
        )
        report = _apply_discovery(cluster, discovered)
    report.warnings = warnings
    return report


def discover_in_worker(cluster_id: int) -> str:
    """Discovery as the worker task runs it (never in the web process): the outcome lands on
    the cluster (``last_error``, ``reachable``), where the admin and operations pages show it."""
    cluster = Cluster.objects.get(pk=cluster_id)
    try:
        check_options(cluster.backend, cluster.options)
        report = rediscover(cluster)
    except (BackendError, JobValidationError) as exc:
        record_discovery_error(cluster_id, str(exc))
        return f"{cluster.name}: {exc}"
    unpriced = (
        f"discovery: unpriced GPU types {', '.join(report.unpriced)}: their nodes stay drained "
        "until a cost factor is set under GPU types"
        if report.unpriced
        else ""
    )
    Cluster.objects.filter(pk=cluster_id).update(reachable=True, last_error=unpriced)
    vanished = f"; drained {', '.join(report.vanished)} (gone)" if report.vanished else ""
    return (
        f"{cluster.name}: {len(report.nodes)} nodes, {report.total_gpus} GPUs{vanished}"
        f"{'; ' + unpriced if unpriced else ''}"
    )


def record_discovery_error(cluster_id: int, message: str) -> None:
    Cluster.objects.filter(pk=cluster_id).update(
        reachable=False, last_error=f"discovery: {message}"[:2000]
    )


def rediscover(cluster: Cluster) -> DiscoveryReport:
    discovered = get_backend(cluster.backend, cluster.name, cluster.options).discover_nodes()
    with transaction.atomic():
        return _apply_discovery(cluster, discovered)


UNPRICED = "unpriced GPU type"


def _unpriced(discovered) -> set[str]:
    from budgets.models import GpuType

    types = {info.gpu_type for info in discovered}
    return types - set(GpuType.objects.filter(name__in=types).values_list("name", flat=True))


def _apply_discovery(cluster: Cluster, discovered) -> DiscoveryReport:
    """Record the nodes. A node whose GPU type has no price is drained (nothing lands on it,
    so nothing is charged at a guessed price) and reported, until an operator prices the type
    and rediscovers; the drain then lifts by itself."""
    report = DiscoveryReport(cluster=cluster)
    unpriced = _unpriced(discovered)
    report.unpriced = sorted(unpriced)
    existing = {n.name: n for n in Node.objects.select_for_update().filter(cluster=cluster)}
    seen = set()
    for info in discovered:
        seen.add(info.name)
        node = existing.get(info.name)
        if node is None:
            node = Node.objects.create(
                cluster=cluster,
                name=info.name,
                gpus=info.gpus,
                gpu_type=info.gpu_type,
                drained=info.drained,
                drain_reason=info.reason if info.drained else "",
            )
            report.added.append(info.name)
        else:
            node.gpus, node.gpu_type, node.present = info.gpus, info.gpu_type, True
            node.save(update_fields=["gpus", "gpu_type", "present"])
            report.updated.append(info.name)
        _mark_price(node, info.gpu_type in unpriced)
        report.nodes.append(node)
    now = timezone.now()
    for name, node in existing.items():
        if name in seen or not node.present:
            continue
        # A node the backend no longer reports is drained: nothing new lands there.
        node.present, node.drained = False, True
        node.drain_reason = "no longer reported by the backend"
        node.drain_requested_at = now
        node.save(update_fields=["present", "drained", "drain_reason", "drain_requested_at"])
        report.vanished.append(name)
    types = Counter(info.gpu_type for info in discovered if info.gpu_type not in unpriced)
    types = types or Counter(info.gpu_type for info in discovered)
    cluster.gpu_type = types.most_common(1)[0][0]
    cluster.save(update_fields=["gpu_type"])
    return report


def _mark_price(node: Node, unpriced: bool) -> None:
    if unpriced and not node.drained:
        node.drained = True
        node.drain_reason = f"{UNPRICED} {node.gpu_type}: set its cost factor, then rediscover"
        node.drain_requested_at = timezone.now()
        node.save(update_fields=["drained", "drain_reason", "drain_requested_at"])
    elif not unpriced and node.drained and node.drain_reason.startswith(UNPRICED):
        node.drained, node.drain_reason, node.drain_requested_at = False, "", None
        node.save(update_fields=["drained", "drain_reason", "drain_requested_at"])
