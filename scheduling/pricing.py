"""What one second of a job costs: the one price function behind the lien, the ledger, the
explanation and the reports (the engine prices by the same rule: the GPU type of the nodes a
job runs on, never the cluster's most common type).

A GPU type without a ``GpuType`` row has no price. Discovery refuses to schedule on such nodes
(it drains them and tells the operator), so nothing is ever charged at a silent 1.0.
"""

from __future__ import annotations

from decimal import Decimal

from scheduling.models import Job, Node


class UnpricedGpuType(LookupError):
    def __init__(self, name: str):
        super().__init__(f"gpu_type: GPU type {name!r} has no cost factor; price it first")
        self.field = "gpu_type"
        self.name = name


def node_gpu_type(job: Job, known: dict | None = None) -> str:
    """The GPU type of the nodes ``job`` runs (or last ran) on; the cluster's type before it
    ever started. A placement never mixes types (the engine places within one type)."""
    if not job.nodes:
        return job.cluster.gpu_type
    name = job.nodes[0][0]
    key = ("node", job.cluster_id, name)
    if known is not None and key in known:
        return known[key]
    gpu_type = (
        Node.objects.filter(cluster_id=job.cluster_id, name=name)
        .values_list("gpu_type", flat=True)
        .first()
    ) or job.cluster.gpu_type
    if known is not None:
        known[key] = gpu_type
    return gpu_type


def gpu_type_row(job: Job, known: dict | None = None):
    """The priced ``GpuType`` row of the job's nodes (one query, then cached in ``known``);
    raises UnpricedGpuType."""
    from budgets.models import GpuType

    place = ("place", job.cluster_id, job.nodes[0][0] if job.nodes else None)
    if known is not None and place in known:
        return known[place]
    if job.nodes:
        on_node = Node.objects.filter(cluster_id=job.cluster_id, name=job.nodes[0][0])
        row = GpuType.objects.filter(name__in=on_node.values("gpu_type")).first()
    else:
        row = GpuType.objects.filter(name=job.cluster.gpu_type).first()
    if row is None:
        raise UnpricedGpuType(node_gpu_type(job))
    if known is not None:
        known[place] = row
    return row


def known_places(*cluster_ids: int) -> dict:
    """``gpu_type_row``'s cache filled for every priced node of these clusters (two queries),
    for a pass or a charging run that prices many jobs. Unpriced nodes are left out: looking
    them up raises."""
    from budgets.models import GpuType

    rows = {row.name: row for row in GpuType.objects.all()}
    return {
        ("place", cluster_id, name): rows[gpu_type]
        for cluster_id, name, gpu_type in Node.objects.filter(
            cluster_id__in=cluster_ids
        ).values_list("cluster_id", "name", "gpu_type")
        if gpu_type in rows
    }


def cost_factor(job: Job, known: dict | None = None) -> Decimal:
    return Decimal(str(gpu_type_row(job, known).cost_factor))


def cost_gpu_seconds(job: Job, seconds: int, known: dict | None = None) -> int:
    """Cost-normalised GPU-seconds for ``seconds`` of the job on its nodes (the ledger's
    rounding: half up, per interval)."""
    from budgets.ledger import cost_of

    return cost_of(job.gpus * int(seconds), gpu_type_row(job, known))


def affordable_seconds(job: Job, budget: int, known: dict | None = None) -> int:
    """The most whole seconds of the job whose cost (``cost_gpu_seconds``, rounded as the
    ledger rounds) stays within ``budget`` cost-GPU-seconds; 0 when nothing is left. Exact:
    not the budget over a per-second cost rounded to a whole number, which on a fractional
    factor (4 GPUs at 1.8 cost 7.2 a second) lets a charge run past the floor."""
    rate = job.gpus * cost_factor(job, known)
    if rate <= 0:
        return 10**9  # a free GPU type: no floor stops it (the interval bounds the charge)
    if budget <= 0:
        return 0
    seconds = int(Decimal(budget) / rate)
    while cost_gpu_seconds(job, seconds + 1, known) <= budget:
        seconds += 1
    while seconds > 0 and cost_gpu_seconds(job, seconds, known) > budget:
        seconds -= 1
    return seconds
