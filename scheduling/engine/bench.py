"""Benchmark one scheduling pass on a synthetic snapshot.

``python -m scheduling.engine.bench --pending 10000 --running 4000 --nodes 512 --json``

The snapshot: 3 programs x 50 projects, 150 users spread over them, 8-GPU nodes, running jobs
packed onto the nodes (mostly 1 GPU, some 2 and 4, a few whole nodes) with protections ending
at different times, and pending jobs of mixed sizes (1, 2, 4, 8, 16, 32 GPUs). Seeded, so
every run builds the same snapshot. Prints one JSON line with ``median_ms`` over ``--repeat``
passes (after one warm-up pass).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

from scheduling.engine import schedule
from scheduling.engine.model import BudgetNode, Node, PendingJob, RunningJob, Snapshot

PROGRAMS = ("vision", "language", "speech")


def synthetic_snapshot(pending: int, running: int, nodes: int, seed: int = 7) -> Snapshot:
    rng = random.Random(seed)
    now = 1_000_000.0
    budgets = []
    projects = []
    for p in PROGRAMS:
        budgets.append(BudgetNode(p, rng.uniform(1, 3), 0.0, 0.0))
        for k in range(50):
            path = f"{p}/proj-{k:02d}"
            projects.append(path)
            budgets.append(
                BudgetNode(path, rng.uniform(0.5, 2), rng.uniform(0, 5e6), rng.uniform(0, 2e7))
            )
    users = [f"user-{u:03d}" for u in range(150)]
    node_list = tuple(Node(f"gpu-{i:04d}", "main", "H100", 8) for i in range(nodes))
    free = [8] * nodes
    run = []
    sizes = (1,) * 90 + (2,) * 6 + (4,) * 3 + (8,)
    spare = nodes * 8 - running  # GPUs beyond one per job: lets some jobs be larger
    i = 0
    for j in range(running):
        gpus = rng.choice(sizes)
        if gpus - 1 > spare:
            gpus = 1
        spare -= gpus - 1
        for _ in range(nodes):
            if free[i] >= gpus:
                break
            i = (i + 1) % nodes
        if free[i] < gpus:
            gpus = 1
            if free[i] < 1:
                continue
        free[i] -= gpus
        protected = now + rng.uniform(-4 * 3600, 8 * 3600)
        run.append(
            RunningJob(
                f"r{j}",
                rng.choice(projects),
                rng.choice(users),
                gpus,
                ((node_list[i].name, gpus),),
                protected - 3600,
                protected,
                rng.random() > 0.1,
                submit_s=now - rng.uniform(0, 1e5),
            )
        )
    pend = tuple(
        PendingJob(
            f"p{j}",
            rng.choice(projects) if rng.random() > 0.05 else "",
            rng.choice(users),
            rng.choice((1, 1, 1, 1, 2, 2, 4, 8, 8, 16, 32)),
            now - rng.uniform(0, 5e5),
            rng.choice((600.0, 3600.0, 7200.0, 28800.0)),
            priority=rng.choice(("low", "normal", "high", "urgent")),
        )
        for j in range(pending)
    )
    usage = {(p, u): rng.uniform(0, 1e5) for p in projects[:20] for u in users[:30]}
    return Snapshot(now, node_list, tuple(budgets), tuple(run), pend, {"H100": 1.0}, usage)


def reference_work(n: int = 10_000) -> int:
    """A fixed pure-Python workload (build, sort and index tuples), independent of the
    engine: timed next to each pass with ``--baseline``, it measures how fast the machine is
    right now, so ``ratio`` compares runs taken under different loads or on other machines."""
    rng = random.Random(1)
    rows = [(rng.random(), f"job-{i}", i) for i in range(n)]
    rows.sort()
    index = {r[1]: r for r in rows}
    return sum(r[2] for r in index.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pending", type=int, default=10_000)
    ap.add_argument("--running", type=int, default=4_000)
    ap.add_argument("--nodes", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--policy", default="fairshare")
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of one pass")
    ap.add_argument(
        "--baseline",
        action="store_true",
        help="time a fixed reference workload next to each pass; report baseline_ms and ratio",
    )
    args = ap.parse_args(argv)
    snap = synthetic_snapshot(args.pending, args.running, args.nodes)
    if args.policy != "fairshare":
        from dataclasses import replace

        snap = replace(snap, policy=replace(snap.policy, name=args.policy))
    if args.profile:
        import cProfile
        import pstats

        cProfile.runctx("schedule(snap)", globals(), {"snap": snap, "schedule": schedule}, "/tmp/p")
        pstats.Stats("/tmp/p").sort_stats("cumulative").print_stats(25)
        return 0
    decisions = schedule(snap)
    times, cpu, base = [], [], []
    for _ in range(args.repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        schedule(snap)
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
        if args.baseline:
            t0 = time.perf_counter()
            reference_work()
            base.append((time.perf_counter() - t0) * 1000)
    result = {
        "pending": args.pending,
        "running": len(snap.running),
        "nodes": args.nodes,
        "policy": args.policy,
        "median_ms": round(statistics.median(times), 2),
        "min_ms": round(min(times), 2),
        "max_ms": round(max(times), 2),
        # CPU time of this process: what the pass costs when other work shares the cores.
        "cpu_median_ms": round(statistics.median(cpu), 2),
        "runs": args.repeat,
        "starts": len(decisions.starts),
        "preemptions": len(decisions.preemptions),
    }
    if args.baseline:
        result["baseline_ms"] = round(statistics.median(base), 2)
        result["ratio"] = round(statistics.median(times) / statistics.median(base), 3)
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>12}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
