"""The demo's clusters and a backlog of jobs, so the queue visibly moves in `make demo`.

One clock: the simulated clusters run in real time (speed 1), and the demo's jobs are minutes
long — protected 5 to 10 minutes, running 4 to 30 — so protection, work and charges all count
the same seconds. (At 60× speed an 8 h job ran 8 minutes while its protection ran 8 real hours,
so nobody ever saw a funded job preempted after its protection.) The backlog oversubscribes the
clusters: within ten minutes of `make demo` a visitor sees funded jobs preempted once their
protection ends by better-ranked projects, unfunded work yielding to funded work, and a node of
jupiter drained for maintenance emptying as its jobs' protections end (`keep_demand` starts a
drain when none is under way and puts a node back once it has stood empty a few minutes).
"""

from __future__ import annotations

import datetime as dt
import random

from django.contrib.auth import get_user_model
from django.utils import timezone

from budgets.access import user_projects
from budgets.models import Role
from scheduling.demo_history import record_history
from scheduling.discovery import register_cluster
from scheduling.models import Cluster, Job
from scheduling.services import JobRequest, set_node_drain, submit_job

CLUSTERS = [
    # name, GPU type, nodes of 8 GPUs
    ("jupiter", "H100", 128),
    ("saturn", "B200", 32),
    ("neptune", "B300", 11),
]
SIZES = [1, 1, 2, 4, 8, 8, 8, 16, 32, 64]
SPEED = "1"
OLD_SPEED = "60"  # demos seeded before the one clock
DRAIN_REASON = "demo maintenance: firmware update"
REPAIR_AFTER = dt.timedelta(minutes=4)
DRAIN_EVERY = dt.timedelta(minutes=3)  # at most one new maintenance drain this often


def _clusters() -> list[Cluster]:
    clusters = []
    for name, gpu_type, nodes in CLUSTERS:
        existing = Cluster.objects.filter(name=name).first()
        if existing is None:
            report = register_cluster(
                name,
                "simulated",
                {"nodes": str(nodes), "gpus_per_node": "8", "gpu_type": gpu_type, "speed": SPEED},
            )
            existing = report.cluster
        elif existing.options.get("speed") == OLD_SPEED:
            # The demo's own earlier setting, not a person's: move it to the one clock.
            Cluster.objects.filter(pk=existing.pk).update(
                options={**existing.options, "speed": SPEED}
            )
        clusters.append(existing)
    return clusters


def _researchers() -> list:
    people = {
        role.user for role in Role.objects.filter(role=Role.Kind.RESEARCHER).select_related("user")
    }
    return sorted(people, key=lambda u: u.username)


def _submit_one(rng: random.Random, person, cluster: Cluster) -> int:
    """Submit one plausible job for ``person`` on ``cluster``; return its GPUs."""
    projects = list(user_projects(person).values_list("slug_path", flat=True))
    unfunded = rng.random() < 0.2
    gpus = rng.choice(SIZES)
    min_runtime_s = rng.choice([300, 300, 420, 600])
    duration_s = int(min_runtime_s * rng.uniform(0.8, 3.0))
    if rng.random() < 0.3:
        # Long resumable training with a short protected window: after its 5 protected
        # minutes, better-ranked work can preempt it, and it resumes later.
        min_runtime_s, duration_s = 300, int(60 * rng.uniform(20, 40))
    submit_job(
        person,
        JobRequest(
            name=f"{rng.choice(['pretrain', 'sweep', 'eval', 'finetune', 'ablation'])}-"
            f"{rng.randint(100, 999)}",
            project="" if unfunded or not projects else rng.choice(projects),
            cluster=cluster.name,
            gpus=gpus,
            min_runtime_s=min_runtime_s,
            sim_duration_s=duration_s,
            command="python train.py",
        ),
    )
    return gpus


def _backlog(clusters: list[Cluster]) -> int:
    rng = random.Random(11)
    people = _researchers()
    created = 0
    for cluster in clusters:
        capacity = sum(n.gpus for n in cluster.nodes.all())
        demand = 0
        while demand < capacity * 2.2:
            demand += _submit_one(rng, rng.choice(people), cluster)
            created += 1
    return created


def keep_demand(factor: float = 1.5, seed: int | None = None) -> int:
    """Top each demo cluster's queue up until waiting + running GPUs reach ``factor`` × its
    capacity, as researchers would keep submitting. Returns the number of jobs submitted."""
    rng = random.Random(seed)
    people = _researchers()
    created = 0
    maintain()
    for cluster in Cluster.objects.filter(backend=Cluster.Backend.SIMULATED):
        capacity = sum(n.gpus for n in cluster.nodes.all())
        demand = sum(Job.objects.active().filter(cluster=cluster).values_list("gpus", flat=True))
        while people and demand < capacity * factor:
            demand += _submit_one(rng, rng.choice(people), cluster)
            created += 1
    return created


def _busy_nodes(cluster: Cluster) -> dict[str, list[Job]]:
    running: dict[str, list[Job]] = {}
    for job in Job.objects.filter(cluster=cluster, state=Job.State.RUNNING):
        for name, _gpus in job.nodes or []:
            running.setdefault(name, []).append(job)
    return running


def maintain(cluster_name: str = "jupiter", now: dt.datetime | None = None) -> str:
    """The demo's maintenance crew, as an admin would act: put back a node the demo drained once
    it has stood empty for a few minutes, and drain the busy node that will empty soonest when
    no demo drain is under way. Returns what it did ("" for nothing)."""
    now = now or timezone.now()
    admin = get_user_model().objects.filter(username="admin").first()
    cluster = Cluster.objects.filter(name=cluster_name).first()
    if admin is None or cluster is None:
        return ""
    busy = _busy_nodes(cluster)
    ours = list(cluster.nodes.filter(drained=True, drain_reason=DRAIN_REASON))
    done = []
    for node in ours:
        if node.name not in busy and node.drain_requested_at <= now - REPAIR_AFTER:
            set_node_drain(admin, node.pk, False)
            done.append(f"{node.name} repaired")
    latest = max((n.drain_requested_at for n in ours if n.drained), default=None)
    spaced = latest is None or latest <= now - DRAIN_EVERY
    if spaced and not any(node.name in busy for node in ours):
        candidates = [
            (max(j.protected_until or now for j in busy[n.name]), n.name, n)
            for n in cluster.nodes.filter(drained=False, present=True)
            if n.name in busy
        ]
        if candidates:
            node = min(candidates, key=lambda c: c[:2])[2]
            set_node_drain(admin, node.pk, True, DRAIN_REASON)
            done.append(f"{node.name} draining")
    return ", ".join(done)


def seed(history: bool = True) -> str:
    """The clusters, then, on a database with no jobs yet, weeks of finished jobs and their
    charges (``scheduling.demo_history``; not without ``history``) and a backlog waiting now."""
    clusters = _clusters()
    if Job.objects.exists():
        return f"Clusters: {', '.join(c.name for c in clusters)} (jobs already seeded)"
    finished, days = record_history() if history else (0, 0)
    created = _backlog(clusters)
    gpus = sum(n.gpus for c in clusters for n in c.nodes.all())
    recorded = f"{finished} finished jobs over {days} days, " if finished else ""
    return (
        f"Clusters: {len(clusters)} simulated, {gpus} GPUs; {recorded}a backlog of {created} jobs"
    )
