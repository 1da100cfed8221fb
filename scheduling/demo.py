"""The demo's clusters and a backlog of jobs, so the queue visibly moves in `make demo`.

Clusters are simulated at 60× speed (an 8 h job lasts 8 minutes; protection windows run on the
real clock). The backlog oversubscribes them: funded jobs from every project, and unfunded work
that yields whenever funded work needs the GPUs, so a job submitted in the browser starts
within a minute or two.
"""

from __future__ import annotations

import random

from budgets.access import user_projects
from budgets.models import Role
from scheduling.discovery import register_cluster
from scheduling.models import Cluster, Job
from scheduling.services import JobRequest, submit_job

CLUSTERS = [
    # name, GPU type, nodes of 8 GPUs
    ("jupiter", "H100", 128),
    ("saturn", "B200", 32),
    ("neptune", "B300", 11),
]
SIZES = [1, 1, 2, 4, 8, 8, 8, 16, 32, 64]
SPEED = "60"


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
    hours = rng.choice([1, 2, 4, 8])
    min_runtime_s = hours * 3600
    duration_s = int(hours * 3600 * rng.uniform(0.8, 2.5))
    if rng.random() < 0.3:
        # Long resumable training with a short protected window: its simulated day lasts
        # ~30 real minutes, so after its 10 protected minutes better-ranked work can preempt it
        # (protection runs on the real clock).
        min_runtime_s, duration_s = 600, int(3600 * rng.uniform(24, 40))
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
    for cluster in Cluster.objects.filter(backend=Cluster.Backend.SIMULATED):
        capacity = sum(n.gpus for n in cluster.nodes.all())
        demand = sum(Job.objects.active().filter(cluster=cluster).values_list("gpus", flat=True))
        while people and demand < capacity * factor:
            demand += _submit_one(rng, rng.choice(people), cluster)
            created += 1
    return created


def seed() -> str:
    clusters = _clusters()
    if Job.objects.exists():
        return f"Clusters: {', '.join(c.name for c in clusters)} (jobs already seeded)"
    created = _backlog(clusters)
    gpus = sum(n.gpus for c in clusters for n in c.nodes.all())
    return f"Clusters: {len(clusters)} simulated, {gpus} GPUs; a backlog of {created} jobs"
