"""Read-only aggregates for the scheduling pages: the queue index, the running overview and the
operations page.

Every function runs a fixed number of queries whatever the number of jobs or nodes: rows come
in through one ``values_list`` or one ``select_related`` query each and are grouped in Python,
so the query count of a page does not grow with the queue (the tests pin it).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Count, Q, Sum
from django.utils import timezone

from scheduling.models import Cluster, Job, JobEvent, LedgerCheck, Node

IDLE_AFTER = timedelta(hours=1)
WAIT_WINDOW = timedelta(days=7)
PREEMPTION_WINDOW = timedelta(hours=24)
# Work lost to preemption and the most-preempted jobs are shown over a day and a week: an
# unstable job is preempted a few times a day, and a week shows whether it keeps happening.
PREEMPTION_WEEK = timedelta(days=7)
MOST_PREEMPTED = 5
# How the engine words each cause of a preemption (scheduling/engine/pass_place.py, passes.py).
CAUSES = {
    "after_protection": Q(message__startswith="Its protection had ended"),
    "unfunded": Q(message__startswith="It ran unfunded"),
    "drain": Q(message__contains="is draining for maintenance"),
}
# Job-size buckets for wait times: (label, smallest, largest GPU count).
SIZE_BUCKETS = (
    ("1 GPU", 1, 1),
    ("2–8 GPUs", 2, 8),
    ("9–64 GPUs", 9, 64),
    ("> 64 GPUs", 65, math.inf),
)


def is_idle(job: Job, now: datetime | None = None) -> bool:
    """Squatting: GPU utilisation below 10 % (the reconcile loop's threshold) for over an hour."""
    now = now or timezone.now()
    since = job.low_utilization_since
    return job.state == Job.State.RUNNING and since is not None and now - since > IDLE_AFTER


# -- queue index --------------------------------------------------------------------------------
@dataclass
class ClusterSummary:
    cluster: Cluster
    total_gpus: int = 0
    busy_gpus: int = 0
    pending: int = 0
    running: int = 0

    @property
    def utilization(self) -> float:
        return self.busy_gpus / self.total_gpus if self.total_gpus else 0.0


def cluster_summaries() -> list[ClusterSummary]:
    """Every cluster with its GPUs, busy GPUs and job counts: three queries."""
    rows = {c.pk: ClusterSummary(c) for c in Cluster.objects.order_by("name")}
    totals = (
        Node.objects.filter(present=True)
        .values_list("cluster_id")
        .annotate(gpus=Sum("gpus"))
        .order_by()
    )
    for cluster_id, gpus in totals:
        rows[cluster_id].total_gpus = gpus or 0
    counts = (
        Job.objects.active()
        .values_list("cluster_id")
        .annotate(
            pending=Count("pk", filter=Q(state="pending")),
            running=Count("pk", filter=Q(state="running")),
            busy=Sum("gpus", filter=Q(state="running")),
        )
        .order_by()
    )
    for cluster_id, pending, running, busy in counts:
        rows[cluster_id].pending, rows[cluster_id].running = pending, running
        rows[cluster_id].busy_gpus = busy or 0
    return list(rows.values())


# -- running overview ---------------------------------------------------------------------------
@dataclass
class Group:
    """A program or a project in the running overview."""

    label: str
    budget_share: float | None = None  # share of the whole tree (None: no budget behind it)
    usage_share: float | None = None  # its part of all GPU-hours charged this period
    used_fraction: float | None = None  # of its own grant
    funded_gpus: int = 0
    unfunded_gpus: int = 0
    jobs: list = field(default_factory=list)
    children: dict = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        return self.funded_gpus + self.unfunded_gpus

    @property
    def idle_jobs(self) -> int:
        return sum(1 for job in self.jobs if job.idle)

    @property
    def wasted_gpu_hours(self) -> float:
        """GPU-hours its running jobs have held under the idle threshold (GPU telemetry)."""
        return round(sum(job.wasted_gpu_seconds for job in self.jobs) / 3600, 1)

    def add(self, job: Job) -> None:
        if job.funded:
            self.funded_gpus += job.gpus
        else:
            self.unfunded_gpus += job.gpus


def _group_for(stats_node, total_used) -> Group:
    if stats_node is None:
        return Group(label="No project (unfunded work)")
    used = float(stats_node.used_gpu_hours)
    return Group(
        label=stats_node.node.slug_path or stats_node.node.name,
        budget_share=stats_node.share_of_whole,
        usage_share=used / total_used if total_used else 0.0,
        used_fraction=stats_node.used_fraction,
    )


def running_overview(jobs, now: datetime | None = None) -> dict:
    """What runs right now, grouped program → project, with each group's budget share against
    its share of this period's charged usage, funded and unfunded GPUs, and idle jobs.

    `jobs` is the caller's visible running jobs (``visible_jobs(user).for_running_overview()``):
    one query for them, three for the tree's numbers.
    """
    from budgets.balances import tree_stats
    from budgets.models import BudgetNode

    now = now or timezone.now()
    stats = tree_stats()
    by_pk = dict(stats)
    by_path = {s.node.path: s for s in stats.values()}
    total_used = float(sum(s.used_gpu_hours for s in stats.values() if s.node.depth == 1))
    step = BudgetNode.steplen
    programs: dict[str, Group] = {}
    funded = unfunded = 0
    for job in jobs:
        job.idle = is_idle(job, now)
        node = by_pk.get(job.project_id)
        program_node = by_path.get(node.node.path[: 2 * step]) if node else None
        key = program_node.node.path if program_node else ""
        program = programs.setdefault(key, _group_for(program_node, total_used))
        if job.project_id not in program.children:
            program.children[job.project_id] = _group_for(node, total_used)
        project = program.children[job.project_id]
        for group in (program, project):
            group.add(job)
        program.jobs.append(job)
        project.jobs.append(job)
        funded += job.gpus if job.funded else 0
        unfunded += 0 if job.funded else job.gpus
    ordered = sorted(programs.values(), key=lambda g: (g.budget_share is None, g.label))
    return {
        "programs": ordered,
        "funded_gpus": funded,
        "unfunded_gpus": unfunded,
        "idle_jobs": sum(g.idle_jobs for g in ordered),
        "now": now,
    }


# -- operations ---------------------------------------------------------------------------------
def percentile(values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile (the value below which `fraction` of the values lie)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def wait_percentiles(now: datetime | None = None) -> list[dict]:
    """p50 and p95 of the wait before a job first started (first_started_at − submitted_at),
    by job size, over the last 7 days. Later requeues do not count as waiting again."""
    now = now or timezone.now()
    if connection.vendor == "postgresql":
        return _wait_percentiles_in_sql(now - WAIT_WINDOW)
    return _wait_percentiles_in_python(now - WAIT_WINDOW)


def _wait_percentiles_in_python(since: datetime) -> list[dict]:
    waits: dict[str, list[float]] = defaultdict(list)
    for gpus, submitted, started in Job.objects.for_wait_times(since):
        for label, low, high in SIZE_BUCKETS:
            if low <= gpus <= high:
                waits[label].append(max(0.0, (started - submitted).total_seconds()))
    return [
        {
            "label": label,
            "count": len(waits[label]),
            "p50_s": percentile(waits[label], 0.5),
            "p95_s": percentile(waits[label], 0.95),
        }
        for label, _, _ in SIZE_BUCKETS
    ]


def _wait_percentiles_in_sql(since: datetime) -> list[dict]:
    """``wait_percentiles`` computed by PostgreSQL (``percentile_disc`` is the nearest rank):
    a week of a large cluster's starts is tens of thousands of rows, which the page no longer
    loads."""
    cases, params = [], []
    for label, low, high in SIZE_BUCKETS:
        cases.append("WHEN gpus BETWEEN %s AND %s THEN %s")
        params += [low, min(high, 2**31 - 1), label]
    sql = (
        "SELECT bucket, COUNT(*), percentile_disc(0.5) WITHIN GROUP (ORDER BY wait),"
        " percentile_disc(0.95) WITHIN GROUP (ORDER BY wait) FROM ("
        f" SELECT CASE {' '.join(cases)} END AS bucket,"
        " GREATEST(0, EXTRACT(EPOCH FROM first_started_at - submitted_at)) AS wait"
        f" FROM {Job._meta.db_table} WHERE first_started_at >= %s) AS waits"
        " WHERE bucket IS NOT NULL GROUP BY bucket"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, since])
        found = {bucket: (n, p50, p95) for bucket, n, p50, p95 in cursor.fetchall()}
    rows = []
    for label, _, _ in SIZE_BUCKETS:
        n, p50, p95 = found.get(label, (0, None, None))
        rows.append(
            {
                "label": label,
                "count": n,
                "p50_s": None if p50 is None else float(p50),
                "p95_s": None if p95 is None else float(p95),
            }
        )
    return rows


@dataclass
class NodeRow:
    node: Node
    busy_gpus: int = 0
    jobs: int = 0

    @property
    def ready_for_repair(self) -> bool:
        return self.node.drained and self.jobs == 0


@dataclass
class ClusterOps:
    cluster: Cluster
    nodes: list[NodeRow] = field(default_factory=list)
    funded_gpus: int = 0
    unfunded_gpus: int = 0
    preemptions_24h: int = 0
    # The same preemptions by cause, read from the engine's reason sentences (see CAUSES).
    after_protection_24h: int = 0
    unfunded_yields_24h: int = 0
    drain_preemptions_24h: int = 0
    # GPU-seconds of work lost to preemption by the cost model (scheduling/preemption_cost.py)
    lost_gpu_seconds_24h: int = 0
    lost_gpu_seconds_7d: int = 0
    ledger: LedgerCheck | None = None  # the last periodic ledger check, if one ran

    @property
    def lost_gpu_hours_24h(self) -> float:
        return self.lost_gpu_seconds_24h / 3600

    @property
    def lost_gpu_hours_7d(self) -> float:
        return self.lost_gpu_seconds_7d / 3600

    @property
    def drained_empty(self) -> int:
        """Drains that have emptied their node: drained, ready for repair."""
        return sum(1 for row in self.nodes if row.ready_for_repair)

    @property
    def total_gpus(self) -> int:
        return sum(row.node.gpus for row in self.nodes if row.node.present)

    @property
    def busy_gpus(self) -> int:
        return self.funded_gpus + self.unfunded_gpus

    @property
    def utilization(self) -> float:
        return self.busy_gpus / self.total_gpus if self.total_gpus else 0.0

    @property
    def drains(self) -> list[NodeRow]:
        return [row for row in self.nodes if row.node.drained]


def operations_report(now: datetime | None = None) -> dict:
    """Per cluster: utilisation, funded vs unfunded occupancy, preemptions in the last 24 h,
    the last pass, and every node with what runs on it; work lost to preemption over a day
    and a week; the last ledger check; wait-time percentiles and the most-preempted jobs.
    Six queries."""
    now = now or timezone.now()
    clusters = {
        c.pk: ClusterOps(c, ledger=getattr(c, "ledger_check", None))
        for c in Cluster.objects.select_related("ledger_check").order_by("name")
    }
    node_rows = {}
    for node in Node.objects.select_related("drain_requested_by").order_by("cluster", "name"):
        row = NodeRow(node)
        clusters[node.cluster_id].nodes.append(row)
        node_rows[(node.cluster_id, node.name)] = row
    for cluster_id, gpus, funded, placed in Job.objects.for_occupancy():
        ops = clusters[cluster_id]
        if funded:
            ops.funded_gpus += gpus
        else:
            ops.unfunded_gpus += gpus
        for name, node_gpus in placed or []:
            row = node_rows.get((cluster_id, name))
            if row is not None:
                row.busy_gpus += node_gpus
                row.jobs += 1
    day = Q(at__gte=now - PREEMPTION_WINDOW)
    preempted = (
        JobEvent.objects.filter(kind="preempted", at__gte=now - PREEMPTION_WEEK)
        .values_list("job__cluster_id")
        .annotate(
            n=Count("pk", filter=day),
            **{cause: Count("pk", filter=day & q) for cause, q in CAUSES.items()},
            lost_day=Sum("lost_gpu_seconds", filter=day),
            lost_week=Sum("lost_gpu_seconds"),
        )
        .order_by()
    )
    for cluster_id, count, after_protection, unfunded, drain, lost_day, lost_week in preempted:
        ops = clusters[cluster_id]
        ops.preemptions_24h = count
        ops.after_protection_24h = after_protection
        ops.unfunded_yields_24h = unfunded
        ops.drain_preemptions_24h = drain
        ops.lost_gpu_seconds_24h = lost_day or 0
        ops.lost_gpu_seconds_7d = lost_week or 0
    return {
        "clusters": list(clusters.values()),
        "waits": wait_percentiles(now),
        "most_preempted": most_preempted(now),
        "now": now,
    }


def most_preempted(now: datetime, limit: int = MOST_PREEMPTED) -> list[dict]:
    """The jobs preempted most often in the last week (ties: the most recent job first), with
    their preemptions and the work those cost, in one query."""
    rows = (
        JobEvent.objects.filter(kind="preempted", at__gte=now - PREEMPTION_WEEK)
        .values("job_id", "job__name", "job__state", "job__cluster__name")
        .annotate(preemptions=Count("pk"), lost_gpu_seconds=Sum("lost_gpu_seconds"))
        .order_by("-preemptions", "-job_id")[:limit]
    )
    return [{**row, "lost_gpu_hours": (row["lost_gpu_seconds"] or 0) / 3600} for row in rows]
