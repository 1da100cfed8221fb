"""Seeded snapshots and a canonical digest of Decisions, for the golden-decisions test.

``random_snapshot(seed)`` draws a small but rich snapshot (several clusters and GPU types,
drains, multi-node running jobs, interactive pools, approved reservations, exceptions, held
jobs, empty and unknown projects, thin and rich budgets, all three policies) from a plain
``random.Random``, so the same seed always builds the same snapshot, across Python runs and
hypothesis versions. ``digest(decisions)`` is a sha256 of a canonical JSON of every output
field, so any change in any decision, reason, position, estimate or explanation shows.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random

from scheduling.engine.model import (
    BudgetNode,
    Decisions,
    Node,
    PendingJob,
    Policy,
    Reservation,
    RunningJob,
    Snapshot,
)

NOW = 500_000.0


def canonical(decisions: Decisions) -> str:
    data = dataclasses.asdict(decisions)
    for added in ("defunded", "displacements"):  # added later: empty, they leave digests be
        if not data.get(added):
            data.pop(added, None)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=repr)


def digest(decisions: Decisions) -> str:
    return hashlib.sha256(canonical(decisions).encode()).hexdigest()[:16]


def _budgets(rng: random.Random) -> tuple[list[BudgetNode], list[str]]:
    out, leaves = [], []
    for p in range(rng.randint(1, 3)):
        prog = f"prog{p}"
        out.append(BudgetNode(prog, rng.choice([1.0, 2.0, 3.0]), rng.choice([0.0, 500.0])))
        for k in range(rng.randint(1, 4)):
            proj = f"{prog}/p{k}"
            money = rng.choice([0.0, 2_000.0, 50_000.0, 1e6, 1e12])
            usage = rng.choice([0.0, 100.0, 5_000.0, 80_000.0])
            if rng.random() < 0.25:  # a third level
                out.append(BudgetNode(proj, rng.choice([1.0, 2.0]), usage, 0.0))
                for s in range(2):
                    sub = f"{proj}/s{s}"
                    out.append(BudgetNode(sub, 1.0, rng.choice([0.0, 3_000.0]), money))
                    leaves.append(sub)
            else:
                out.append(BudgetNode(proj, rng.choice([0.5, 1.0, 2.0]), usage, money))
                leaves.append(proj)
    return out, leaves


def random_snapshot(seed: int) -> Snapshot:
    rng = random.Random(seed)
    clusters = [f"k{c}" for c in range(rng.randint(1, 3))]
    types = {c: rng.sample(["A100", "H100", "L4"], rng.randint(1, 2)) for c in clusters}
    nodes = []
    for c in clusters:
        for t in types[c]:
            size = rng.choice([4, 8, 8])
            for _ in range(rng.randint(1, 6)):
                nodes.append(Node(f"{c}-{t}-{len(nodes):02d}", c, t, size, rng.random() < 0.1))
    budgets, leaves = _budgets(rng)
    projects = leaves + ["", "ghost/none"]
    users = ["u1", "u2", "u3", "u4"]
    free = {n.name: n.gpus for n in nodes}
    by_pool: dict = {}
    for n in nodes:
        by_pool.setdefault((n.cluster, n.gpu_type), []).append(n)
    running = []
    for k in range(rng.randint(0, 30)):
        funded = rng.random() < 0.75
        project = rng.choice(leaves if funded else projects)
        prot = NOW + rng.choice([-3600.0, -1.0, 0.0, 200.0, 1800.0, 20_000.0])
        kind = "interactive" if rng.random() < 0.1 else "batch"
        if rng.random() < 0.15:  # a multi-node job on whole nodes
            pool = rng.choice(list(by_pool.values()))
            whole = [n for n in pool if free[n.name] == n.gpus]
            if len(whole) < 2:
                continue
            use = whole[:2]
            for n in use:
                free[n.name] = 0
            placement = tuple((n.name, n.gpus) for n in use)
            gpus = sum(n.gpus for n in use)
        else:
            n = rng.choice(nodes)
            if free[n.name] == 0:
                continue
            gpus = rng.randint(1, free[n.name])
            free[n.name] -= gpus
            placement = ((n.name, gpus),)
        running.append(
            RunningJob(
                f"r{k:02d}",
                project,
                rng.choice(users),
                gpus,
                placement,
                NOW - 7200,
                prot,
                funded,
                kind=kind,
                submit_s=NOW - rng.uniform(0, 50_000),
                protection_source=rng.choice(["contract", "exception #3"]),
            )
        )
    pending = []
    for k in range(rng.randint(0, 60)):
        cluster = rng.choice([None, None, *clusters])
        gpu_type = rng.choice([None, None, *types[cluster]]) if cluster else None
        pending.append(
            PendingJob(
                f"p{k:02d}",
                rng.choice(projects),
                rng.choice(users),
                rng.choice([1, 1, 2, 3, 4, 8, 12, 16, 24, 40]),
                float(rng.randint(0, 20) * 100),
                rng.choice([0.0, 600.0, 3600.0, 40_000.0]),
                cluster=cluster,
                gpu_type=gpu_type,
                kind="interactive" if rng.random() < 0.15 else "batch",
                priority=rng.choice(["low", "normal", "high", "urgent"]),
                held=rng.random() < 0.05,
                max_protection_s=rng.choice([None] * 8 + [43_200.0]),
            )
        )
    reservations = tuple(
        Reservation(
            f"res{r}",
            rng.choice(clusters),
            rng.choice([4, 8, 16]),
            NOW + rng.choice([-600.0, 900.0, 7200.0]),
            NOW + rng.choice([-60.0, 3600.0, 90_000.0]),
            rng.choice(leaves + [""]),
        )
        for r in range(rng.choice([0, 0, 1, 2]))
    )
    policy = Policy(
        name=rng.choice(["fairshare"] * 4 + ["priority", "fifo"]),
        interactive_pool_gpus={c: rng.choice([0, 2, 4, 8]) for c in clusters},
        interactive_per_user=rng.choice([1, 2]),
        preemption=rng.random() < 0.85,
    )
    usage = {(p, u): float(rng.choice([0, 10, 1000])) for p in leaves for u in users}
    return Snapshot(
        NOW,
        tuple(nodes),
        tuple(budgets),
        tuple(running),
        tuple(pending),
        {t: rng.choice([1.0, 1.5, 2.0]) for c in clusters for t in types[c]},
        usage,
        reservations,
        policy,
    )
