"""Database → engine: one cluster's state as the engine's frozen Snapshot.

A fixed number of queries whatever the queue length: budgets with balances (3), own windowed
usage (1), per-user usage (1), nodes (1), jobs (1), their owners' names (1), GPU types (1),
reservations, and the displacement memory (1, when jobs run).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings
from django.db.models import JSONField, Sum, TextField
from django.db.models.base import ModelState
from django.db.models.functions import Cast
from django.utils import timezone

from scheduling.engine import model as m
from scheduling.models import Cluster, Job, JobEvent, Reservation


def epoch(moment: datetime | None) -> float:
    return moment.timestamp() if moment else 0.0


def from_epoch(seconds: float | None) -> datetime | None:
    if seconds is None or seconds == float("inf"):
        return None
    return datetime.fromtimestamp(seconds, tz=UTC)


@dataclass
class SnapshotContext:
    """What the pass needs besides the snapshot: the rows behind the engine's ids."""

    snapshot: m.Snapshot
    jobs: dict[str, Job] = field(default_factory=dict)
    cost_factors: dict[str, float] = field(default_factory=dict)


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


# Job columns neither the engine nor the pass's writes read: not loaded for thousands of rows.
# (A start's dispatch task reads its job again.)
NOT_READ = (
    "command",
    "env",
    "external_id",
    "gpu_utilization",
    "exit_code",
    "last_error",
    "utilization_at",
    "wasted_gpu_seconds",
    "idle_notified_at",
)


def _usernames(ids: set[int]) -> dict[int, str]:
    from django.contrib.auth import get_user_model

    return dict(get_user_model().objects.filter(pk__in=ids).values_list("pk", "username"))


def _live_jobs(cluster: Cluster) -> list[Job]:
    """The cluster's pending and running jobs as model instances, in submit order, without
    the columns of ``NOT_READ`` (read on access, as deferred fields are).

    One query. The instances are built from ``values_list`` rows directly, not through
    ``Model.__init__``, which checks and assigns each of a job's 45 fields one by one: for
    5,000 jobs that was most of a steady pass (issue 12). They are what ``Model.from_db``
    gives (the same attribute values, saved state, database alias), so every later use
    (descriptors, ``refresh_from_db``, deferred loading) works as usual. The JSON columns come
    as text and are parsed here: a waiting job's are ``{}`` and ``[]``, and Django's decoder
    parsing 10,000 of those was a third of the read's Python (115 -> 71 ms of CPU).
    """
    names = [f.attname for f in Job._meta.concrete_fields if f.name not in NOT_READ]
    as_text = {f"{name}__text": Cast(name, TextField()) for name in JSON_READ}
    rows = (
        Job.objects.filter(cluster=cluster, state__in=[Job.State.PENDING, Job.State.RUNNING])
        .order_by("submitted_at", "id")
        .annotate(**as_text)
        .values_list(*(f"{n}__text" if n in JSON_READ else n for n in names))
    )
    parsed = [i for i, name in enumerate(names) if name in JSON_READ]
    jobs = []
    for values in rows:
        values = list(values)
        for i in parsed:
            values[i] = _json(values[i])
        job = Job.__new__(Job)
        job.__dict__.update(zip(names, values, strict=True))
        job._state = ModelState()
        job._state.adding, job._state.db = False, rows.db
        jobs.append(job)
    return jobs


# The JSON columns the pass reads, parsed from their text in ``_live_jobs``.
JSON_READ = tuple(
    f.attname
    for f in Job._meta.concrete_fields
    if isinstance(f, JSONField) and f.name not in NOT_READ
)


def _json(text: str | None):
    if text == "{}":
        return {}
    if text == "[]":
        return []
    return None if text is None else json.loads(text)


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
    jobs = _live_jobs(cluster)
    users = _usernames({j.owner_id for j in jobs})
    for job in jobs:
        # The rows this pass already holds, so that writing a start (its funding chain, its
        # price) reads no budget node or cluster per job; no join of 5,000 job rows either.
        Job.cluster.field.set_cached_value(job, cluster)
        if job.project_id in budget_rows:
            Job.project.field.set_cached_value(job, budget_rows[job.project_id])
    running, pending = [], []
    for job in jobs:
        project = paths.get(job.project_id, "") if job.project_id else ""
        if job.state == Job.State.RUNNING:
            running.append(
                m.RunningJob(
                    id=str(job.pk),
                    project=project,
                    user=users[job.owner_id],
                    gpus=job.gpus,
                    nodes=tuple((name, gpus) for name, gpus in job.nodes),
                    start_s=epoch(job.started_at),
                    protected_until_s=epoch(job.protected_until),
                    funded=job.funded,
                    kind=job.kind,
                    resumable=job.resumable,
                    submit_s=epoch(job.submitted_at),
                    protection_source=job.protection_source,
                )
            )
        else:
            pending.append(
                m.PendingJob(
                    id=str(job.pk),
                    project=project,
                    user=users[job.owner_id],
                    gpus=job.gpus,
                    submit_s=epoch(job.submitted_at),
                    min_runtime_s=float(job.min_runtime_s),
                    cluster=cluster.name,
                    kind=job.kind,
                    resumable=job.resumable,
                    priority=job.priority,
                    held=job.held,
                    max_protection_s=float(job.max_protection_s) if job.max_protection_s else None,
                )
            )
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
    return SnapshotContext(snapshot=snapshot, jobs={str(j.pk): j for j in jobs}, cost_factors=cost)
