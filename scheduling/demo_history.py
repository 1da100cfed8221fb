"""The demo's recorded past: weeks of finished jobs on the demo clusters and the ledger they
were charged to, so the balances, the burn-downs and the what-if preview read one history.

``record_history(now)`` writes, once, on a database with no job and no usage yet:

1. For each cluster, a schedule that keeps it busy, as the live demo is: every GPU is handed
   the next job as soon as it frees up (a job of up to one node takes the node's earliest
   free GPUs; a multi-node job takes whole nodes and waits for the last of them, which is
   where idle GPUs come from). Durations grow with the job's size; the last jobs end at
   ``now`` at the latest.
2. Each job's project is drawn in proportion to its grant times a pace of 55–95 % (so no
   project overspends its period); what the projects leave of the busy capacity is
   unfunded work. Owners are members of the project (any researcher for unfunded work).
3. The ledger is the jobs' own: each funded run is charged gpus × seconds × its GPU type's
   price, in pieces split at local midnights (a day's and a period's usage is the day's and
   the period's), ``job_ref`` the job. Every time is on the whole minute, so each piece's
   cost is exact and the charges add up to the jobs to the GPU-second.
4. Jobs, their events (submitted, running, completed or failed) and the charges are written
   with ``core.bulk_sql.insert_many``: one statement a table for thousands of rows.

Deterministic for the same ``now`` (a seeded ``random.Random``).
"""

from __future__ import annotations

import datetime as dt
import heapq
import math
import random
from dataclasses import dataclass

from django.utils import timezone

from budgets.balances import balances
from budgets.demo import history_start
from budgets.ledger import cost_of
from budgets.models import BudgetNode, GpuType, Role, UsageEntry
from budgets.periods import BudgetPeriod
from core.bulk_sql import insert_many
from scheduling.models import Cluster, Job, JobEvent

# Sizes as the live demo draws them; a cluster never gets a job of more than half its GPUs.
SIZES = [1, 1, 2, 4, 8, 8, 8, 16, 32, 64]
# Median hours by size (up to): small evaluations are short, pretraining runs last a day.
MEDIAN_HOURS = [(2, 1.0), (8, 4.0), (32, 10.0), (64, 20.0)]
MIN_RUNTIMES = [1800, 3600, 3600, 7200, 14400, 28800]  # within the 8 h contract cap
NAMES = ["pretrain", "sweep", "eval", "finetune", "ablation"]
BUSY = 0.93  # the share of capacity the projects and unfunded work ask for together
PACE = (0.55, 0.95)  # each project's share of an even pace through its grant
SHORTEST_MIN = 10


@dataclass
class _Run:
    cluster: Cluster
    gpu_type: str
    gpus: int
    nodes: list  # [[node name, gpus], ...]
    start: int  # minutes from the history's start
    minutes: int


def _minutes(rng: random.Random, gpus: int) -> int:
    median = next(h for size, h in MEDIAN_HOURS if gpus <= size)
    hours = rng.lognormvariate(math.log(median), 0.8)
    return max(SHORTEST_MIN, min(72 * 60, round(hours * 60)))


def _pack(rng: random.Random, cluster: Cluster, end: int) -> list[_Run]:
    """The cluster's schedule over [0, end) minutes (step 1 of the module docstring)."""
    nodes = [n for n in cluster.nodes.all() if n.present]
    lanes = [[0] * n.gpus for n in nodes]  # each node's GPUs' free-at minutes, ascending
    heap = [(0, i) for i in range(len(nodes))]  # (node's earliest free GPU, node)
    total = sum(n.gpus for n in nodes)
    sizes = [s for s in SIZES if s <= max(1, total // 2)]
    runs = []
    while heap:
        t, first = heapq.heappop(heap)
        if t != lanes[first][0]:
            continue  # a stale entry: the node changed since
        if t >= end:
            continue  # this node is done; the others may not be
        gpus = rng.choice(sizes)
        per_node = nodes[first].gpus
        if gpus <= per_node:
            chosen = [(first, gpus)]
            start = lanes[first][gpus - 1]
        else:
            others = sorted(
                (i for i in range(len(nodes)) if i != first and nodes[i].gpus == per_node),
                key=lambda i: (lanes[i][-1], i),
            )[: gpus // per_node - 1]
            chosen = [(i, per_node) for i in (first, *others)]
            start = max(lanes[i][-1] for i, _ in chosen)
        minutes = min(_minutes(rng, gpus), end - start)
        if minutes < SHORTEST_MIN:  # too close to the end: the GPUs stay idle until then
            minutes = 0
        for i, used in chosen:
            until = start + minutes if minutes else end
            lanes[i][:used] = [until] * used
            lanes[i].sort()
            heapq.heappush(heap, (lanes[i][0], i))
        if minutes:
            names = [[nodes[i].name, used] for i, used in chosen]
            runs.append(_Run(cluster, nodes[first].gpu_type, gpus, names, start, minutes))
    return runs


def _funding(now: dt.datetime, clusters: list[Cluster], rng: random.Random):
    """(choices, weights) for ``random.choices``: each project with its members, weighted by
    its grant's hourly rate at its pace, and None with every researcher for unfunded work,
    weighted by what the projects leave of the busy capacity (step 2 of the docstring)."""
    members: dict[int, list] = {}
    for role in Role.objects.filter(
        role=Role.Kind.RESEARCHER, node__archived=False, node__isnull=False
    ).select_related("user", "node"):
        if role.node.is_leaf():
            members.setdefault(role.node_id, []).append(role.user)
    projects = sorted(BudgetNode.objects.filter(pk__in=members), key=lambda n: n.path)
    period = BudgetPeriod.current(now)
    grants = balances(projects, period)
    factors = dict(GpuType.objects.values_list("name", "cost_factor"))
    capacity = sum(  # H100-equivalent GPU-hours an hour
        float(factors.get(n.gpu_type, 1)) * n.gpus
        for c in clusters
        for n in c.nodes.all()
        if n.present
    )
    weights = [float(grants[p.pk].grant_gpu_hours) / period.hours * rng.uniform(*PACE)
               for p in projects]  # fmt: skip
    unfunded = max(0.05 * capacity, BUSY * capacity - sum(weights))
    people = sorted({u for users in members.values() for u in users}, key=lambda u: u.username)
    choices = [(p, sorted(members[p.pk], key=lambda u: u.username)) for p in projects]
    return [*choices, (None, people)], [*weights, unfunded]


def _job(rng: random.Random, run: _Run, t0: dt.datetime, project, owner, index: int) -> dict:
    """The finished job's columns (the model's defaults for the rest)."""
    start = t0 + dt.timedelta(minutes=run.start)
    end = start + dt.timedelta(minutes=run.minutes)
    wait = dt.timedelta(minutes=round(rng.expovariate(1 / (20 + 2 * run.gpus))))
    failed = rng.random() < 0.04
    min_runtime_s = rng.choice(MIN_RUNTIMES)
    return {
        "name": f"{rng.choice(NAMES)}-{index}",
        "owner_id": owner.pk,
        "project_id": project.pk if project else None,
        "cluster_id": run.cluster.pk,
        "gpus": run.gpus,
        "min_runtime_s": min_runtime_s,
        "resumable": rng.random() < 0.85,
        "command": "python train.py",
        "sim_duration_s": run.minutes * 60,
        "state": Job.State.FAILED if failed else Job.State.COMPLETED,
        "exit_code": 1 if failed else 0,
        "submitted_at": start - wait,
        "started_at": start,
        "first_started_at": start,
        "ended_at": end,
        "funded": project is not None,
        "protected_until": start + dt.timedelta(seconds=min_runtime_s),
        "nodes": run.nodes,
        "run_seconds_done": run.minutes * 60,
        "attempt": 1,
        "dispatched": True,
        "last_charged_at": end if project is not None else None,
    }


def _events(job: dict) -> list[dict]:
    at = (job["submitted_at"], job["started_at"], job["ended_at"])
    return [
        {"job_id": job["id"], "at": at[0], "kind": "submitted", "message": f"{job['gpus']} GPUs"},
        {"job_id": job["id"], "at": at[1], "kind": "running",
         "nodes": [name for name, _ in job["nodes"]]},
        {"job_id": job["id"], "at": at[2], "kind": job["state"],
         "message": f"exit code {job['exit_code']}"},
    ]  # fmt: skip


def _charges(job: dict, gpu_type: GpuType, recorded: dt.datetime) -> list[dict]:
    """The run's charges, one per local day it touched (step 3 of the module docstring)."""
    out, start = [], job["started_at"]
    while start < job["ended_at"]:
        day = timezone.localtime(start).date() + dt.timedelta(days=1)
        end = min(timezone.make_aware(dt.datetime.combine(day, dt.time.min)), job["ended_at"])
        gpu_seconds = job["gpus"] * int((end - start).total_seconds())
        out.append(
            {"node_id": job["project_id"], "job_ref": job["id"], "user_id": job["owner_id"],
             "gpu_type_id": gpu_type.pk, "interval_start": start, "interval_end": end,
             "gpu_seconds": gpu_seconds, "cost_gpu_seconds": cost_of(gpu_seconds, gpu_type),
             "recorded_at": recorded}
        )  # fmt: skip
        start = end
    return out


def _insert(model, rows: list[dict]) -> None:
    """``insert_many`` of ``rows``, the model's defaults filling the columns a row leaves out:
    the ORM's ``bulk_create`` spends most of a seed preparing each value of 600,000."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    names = [f.attname for f in fields]
    defaults = {f.attname: f.get_default() for f in fields}
    insert_many(model, names, ([row.get(n, defaults[n]) for n in names] for row in rows))


def record_history(now: dt.datetime | None = None, seed: int = 17) -> tuple[int, int]:
    """Write the history (see the module docstring) unless the database already holds jobs
    or usage: then it belongs to the people using the demo. Returns (jobs, days)."""
    if Job.objects.exists() or UsageEntry.objects.exists():
        return 0, 0
    now = (now or timezone.now()).replace(second=0, microsecond=0)
    t0 = history_start(now)
    end = int((now - t0).total_seconds()) // 60
    rng = random.Random(seed)
    clusters = list(Cluster.objects.filter(backend=Cluster.Backend.SIMULATED).order_by("name"))
    runs = sorted(
        (run for c in clusters for run in _pack(rng, c, end)),
        key=lambda r: (r.start, r.cluster.name, r.nodes),
    )
    choices, weights = _funding(now, clusters, rng)
    jobs = []
    for index, run in enumerate(runs, start=1):
        project, people = rng.choices(choices, weights)[0]
        jobs.append(_job(rng, run, t0, project, rng.choice(people), index))
    _insert(Job, jobs)
    # The table held no job: read the new ids back by the names, unique by their index.
    ids = dict(Job.objects.values_list("name", "pk"))
    for job in jobs:
        job["id"] = ids[job["name"]]
    _insert(JobEvent, [e for job in jobs for e in _events(job)])
    types = {t.name: t for t in GpuType.objects.all()}
    charges = [
        entry
        for job, run in zip(jobs, runs, strict=True)
        if job["project_id"] is not None
        for entry in _charges(job, types[run.gpu_type], now)
    ]
    _insert(UsageEntry, charges)
    return len(jobs), (now - t0).days
