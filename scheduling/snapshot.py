"""Database → engine: one cluster's state as the engine's frozen Snapshot.

A fixed number of queries whatever the queue length: budgets with balances (3), own windowed
usage (1), per-user usage (1), nodes (1), jobs (1), their owners' names (1), GPU types (1),
reservations, and the displacement memory (1, when jobs run).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.db.models import Sum
from django.utils import timezone

from scheduling.engine import model as m
from scheduling.live_jobs import COLUMN, PER_SECOND, LiveJobs, live_rows
from scheduling.models import Cluster, Job, JobEvent, Reservation


def epoch(moment: datetime | None) -> float:
    return moment.timestamp() if moment else 0.0


def from_epoch(seconds: float | None) -> datetime | None:
    if seconds is None or seconds == float("inf"):
        return None
    return datetime.fromtimestamp(seconds, tz=UTC)


@dataclass
class SnapshotContext:
    """What the pass needs besides the snapshot: the rows behind the engine's ids (their
    model instances built on first access, ``live_jobs.LiveJobs``)."""

    snapshot: m.Snapshot
    jobs: LiveJobs
    cost_factors: dict[str, float]


def _budgets(now: datetime) -> tuple[tuple[m.BudgetNode, ...], dict[int, str], dict[int, object]]:
    from budgets.balances import tree_stats, window_start
    from budgets.models import UsageEntry

    stats = tree_stats()
    own_usage = dict(
        UsageEntry.objects.filter(interval_start__gte=window_start(now), interval_start__lt=now)
        .values_list("node_id")
        .annotate(total=Sum("cost_gpu_seconds"))
        .order_by()
    )
    nodes, paths, rows = [], {}, {}
    for pk, s in stats.items():
        paths[pk], rows[pk] = s.node.slug_path, s.node
        if s.node.depth == 1:  # the organisation root is not a share holder
            continue
        basis = s.node.weight if s.node.weight is not None else s.grant_gpu_hours
        nodes.append(
            m.BudgetNode(
                path=s.node.slug_path,
                share=float(basis),
                usage_gpu_s=float(own_usage.get(pk, 0)),
                remaining_gpu_s=float(s.remaining_gpu_hours) * 3600.0,
            )
        )
    nodes.sort(key=lambda n: n.path)
    return tuple(nodes), paths, rows


def _user_usage(now: datetime, paths: dict[int, str], users: dict[int, str]):
    from budgets.balances import windowed_user_usage

    usage: dict[tuple[str, str], float] = defaultdict(float)
    for (node_id, user_id), total in windowed_user_usage(now).items():
        if node_id in paths and user_id in users:
            usage[(paths[node_id], users[user_id])] += float(total)
    return dict(usage)


def _reservations(cluster: Cluster, now: datetime) -> tuple[m.Reservation, ...]:
    """The reservations the scheduler holds on this cluster until their end (one query)."""
    rows = (
        Reservation.objects.filter(cluster=cluster, released_at__isnull=True, ends_at__gt=now)
        .select_related("project")
        .order_by("starts_at", "pk")
    )
    return tuple(
        m.Reservation(
            id=r.ref,
            cluster=cluster.name,
            gpus=r.gpus,
            start_s=r.starts_at.timestamp(),
            end_s=r.ends_at.timestamp(),
            project=r.project.slug_path if r.project_id else "",
        )
        for r in rows
    )


DISPLACED = "displaced"  # JobEvent kind on a victim preempted for standing: "by job #<id>"


def _displacements(
    cluster: Cluster, now: datetime, running: dict[str, m.RunningJob], policy: m.Policy
) -> tuple[m.Displacement, ...]:
    """The engine's memory of who displaced whom (no ping-pong across passes), read back
    from the victims' timelines: one query, only entries whose displacer still runs."""
    if not running:
        return ()
    since = from_epoch(epoch(now) - policy.displacement_memory_s)
    rows = JobEvent.objects.filter(kind=DISPLACED, at__gte=since, job__cluster=cluster)
    out = []
    for victim_id, victim_project, message, at in rows.values_list(
        "job_id", "job__project__slug_path", "message", "at"
    ).order_by("at", "id"):
        by_id = message.rsplit("#", 1)[-1].split()[0] if "#" in message else ""
        by = running.get(by_id)
        if by is not None and victim_project:
            out.append(m.Displacement(str(victim_id), victim_project, by_id, by.project, epoch(at)))
    return tuple(out)


# Where the snapshot finds each value in a row of ``live_rows``.
ID, OWNER, PROJECT, STATE, GPUS, KIND = (
    COLUMN[n] for n in ("id", "owner_id", "project_id", "state", "gpus", "kind")
)
RESUMABLE, PRIORITY, HELD, MIN_RUNTIME, MAX_PROTECTION, SOURCE = (
    COLUMN[n]
    for n in (
        "resumable",
        "priority",
        "held",
        "min_runtime_s",
        "max_protection_s",
        "protection_source",
    )
)
SUBMITTED, STARTED, PROTECTED, FUNDED, NODES = (
    COLUMN[n] for n in ("submitted_at", "started_at", "protected_until", "funded", "nodes")
)


def _seconds(micros: int | None) -> float:
    """Microseconds since the epoch as ``epoch`` gives them: ``datetime.timestamp`` divides
    the same whole number of microseconds by 10**6, so the float is the same."""
    return 0.0 if micros is None else micros / PER_SECOND


def _usernames(ids: set[int]) -> dict[int, str]:
    from django.contrib.auth import get_user_model

    return dict(get_user_model().objects.filter(pk__in=ids).values_list("pk", "username"))


def _engine_jobs(rows, paths, users, cluster: str) -> tuple[list, list]:
    """The engine's running and pending jobs from the rows of ``live_rows``."""
    running, pending = [], []
    is_running = Job.State.RUNNING.value  # a plain str: no enum comparison 5,000 times
    new, pending_job = object.__new__, m.PendingJob
    for row in rows:
        project_id = row[PROJECT]
        project = paths.get(project_id, "") if project_id else ""
        if row[STATE] == is_running:
            running.append(
                m.RunningJob(
                    id=str(row[ID]),
                    project=project,
                    user=users[row[OWNER]],
                    gpus=row[GPUS],
                    nodes=tuple((node, gpus) for node, gpus in json.loads(row[NODES])),
                    start_s=_seconds(row[STARTED]),
                    protected_until_s=_seconds(row[PROTECTED]),
                    funded=row[FUNDED],
                    kind=row[KIND],
                    resumable=row[RESUMABLE],
                    submit_s=_seconds(row[SUBMITTED]),
                    protection_source=row[SOURCE],
                )
            )
            continue
        # Built without the frozen dataclass's __init__, as ``report.fast_new`` builds one:
        # one per waiting job, every field given.
        job = new(pending_job)
        submitted, max_protection = row[SUBMITTED], row[MAX_PROTECTION]
        job.__dict__.update(
            id=str(row[ID]),
            project=project,
            user=users[row[OWNER]],
            gpus=row[GPUS],
            submit_s=0.0 if submitted is None else submitted / PER_SECOND,
            min_runtime_s=float(row[MIN_RUNTIME]),
            cluster=cluster,
            gpu_type=None,
            kind=row[KIND],
            resumable=row[RESUMABLE],
            priority=row[PRIORITY],
            held=row[HELD],
            max_protection_s=float(max_protection) if max_protection else None,
        )
        pending.append(job)
    return running, pending


def build_snapshot(cluster: Cluster, now: datetime | None = None) -> SnapshotContext:
    from budgets.models import GpuType

    now = now or timezone.now()
    budgets, paths, budget_rows = _budgets(now)
    cost = {name: float(f) for name, f in GpuType.objects.values_list("name", "cost_factor")}
    nodes = tuple(
        m.Node(
            name=n.name, cluster=cluster.name, gpu_type=n.gpu_type, gpus=n.gpus, drained=n.drained
        )
        for n in cluster.nodes.filter(present=True).order_by("name")
    )
    rows = live_rows(cluster)
    users = _usernames({row[OWNER] for row in rows})
    running, pending = _engine_jobs(rows, paths, users, cluster.name)
    policy = m.Policy(
        name="fairshare",
        max_min_runtime_s=float(settings.ALLOT_MAX_MIN_RUNTIME_S),
        interactive_pool_gpus={cluster.name: cluster.interactive_pool_gpus},
    )
    snapshot = m.Snapshot(
        now_s=epoch(now),
        nodes=nodes,
        budgets=budgets,
        running=tuple(running),
        pending=tuple(pending),
        gpu_cost=cost,
        user_usage_gpu_s=_user_usage(now, paths, users),
        reservations=_reservations(cluster, now),
        policy=policy,
        displacements=_displacements(cluster, now, {r.id: r for r in running}, policy),
        chain_balances=True,  # tree_stats gives every node its subtree balance
    )
    return SnapshotContext(
        snapshot=snapshot, jobs=LiveJobs(rows, cluster, budget_rows), cost_factors=cost
    )
