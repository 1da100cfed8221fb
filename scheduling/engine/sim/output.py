"""The simulator's outputs: the contract JSON, the events CSV and the optional plot."""

from __future__ import annotations

import csv
import math

from scheduling.engine.sim.simulator import SimResult


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = max(0, math.ceil(q / 100 * len(ordered)) - 1)
    return float(ordered[k])


def to_json(res: SimResult) -> dict:
    allocated_total = sum(res.allocated.values())
    projects = {}
    for leaf in res.tree.leaves():
        p = leaf.path
        waits = res.waits.get(p, [])
        projects[p] = {
            "budget_share": round(res.tree.budget_share(p), 6),
            "delivered_share": round(res.allocated.get(p, 0.0) / allocated_total, 6)
            if allocated_total
            else 0.0,
            "allocated_gpu_hours": round(res.allocated.get(p, 0.0) / 3600, 3),
            "unallocated_gpu_hours": round(res.unallocated.get(p, 0.0) / 3600, 3),
            "wait_p50_s": percentile(waits, 50),
            "wait_p95_s": percentile(waits, 95),
            "wasted_gpu_hours": round(res.wasted.get(p, 0.0) / 3600, 3),
            "fragmentation_gpu_hours": round(res.fragmentation.get(p, 0.0) / 3600, 3),
        }
    capacity = res.total_gpus * res.horizon_s
    return {
        "policy": res.policy,
        "horizon_s": res.horizon_s,
        "utilization": round(res.busy_gpu_s / capacity, 6) if capacity else 0.0,
        "projects": projects,
        "jobs": {
            "submitted": res.submitted,
            "completed": res.completed,
            "preemptions": res.preemptions,
            "protected_preemptions": res.protected_preemptions,
            "max_preemptions_per_job": max(res.preempted.values(), default=0),
            # the five jobs preempted most often (ties by id): where preemption is unstable
            "most_preempted": [
                {"job_id": job_id, "preemptions": n}
                for job_id, n in sorted(res.preempted.items(), key=lambda x: (-x[1], x[0]))[:5]
            ],
        },
        "drains": res.drains,
        "unfunded_gpu_hours": round(sum(res.unallocated.values()) / 3600, 3),
        "share_distance": round(share_distance(projects), 6),
        "share_distance_active": round(active_share_distance(projects, res.waits), 6),
        "wait_by_size": {
            k: {"jobs": len(v), "wait_p50_s": percentile(v, 50), "wait_p95_s": percentile(v, 95)}
            for k, v in sorted(res.wait_by_size.items())
        },
        "passes": res.passes,
        # preemption's cost (lost work + restart overhead, cost-normalised) and GPUs idle
        # while fundable work waited for a placement they could not give (costs.py)
        "wasted_gpu_hours": round(sum(res.wasted.values()) / 3600, 3),
        "fragmentation_gpu_hours": round(res.fragmentation_total / 3600, 3),
        # GPUs idle while fundable work that fits them waited: held for a larger job, or
        # idle until the next pass (costs.py)
        "idle_while_fits_gpu_hours": round(res.idle_while_fits / 3600, 3),
        "preemption_cost": {
            "checkpoint_interval_s": res.scenario.preemption.checkpoint_interval_s,
            "restart_overhead_s": res.scenario.preemption.restart_overhead_s,
        },
    }


def share_distance(projects: dict) -> float:
    """Half the L1 distance between delivered and budget shares: the fraction of allocated
    GPU-hours that went to the wrong project (0 = exactly as granted)."""
    return 0.5 * sum(abs(p["delivered_share"] - p["budget_share"]) for p in projects.values())


def active_share_distance(projects: dict, waits: dict) -> float:
    """The same distance, with budget shares renormalised over the projects that submitted
    work: a team with no jobs in the slice cannot be delivered its share, and the others
    rightly use it."""
    active = {p: v for p, v in projects.items() if waits.get(p)}
    total = sum(v["budget_share"] for v in active.values())
    if not total:
        return 0.0
    return 0.5 * sum(abs(v["delivered_share"] - v["budget_share"] / total) for v in active.values())


def format_time(t: float) -> str:
    """Exact: integer seconds when the time is whole, else three fixed decimals (``%g`` kept
    six significant digits, so past 10^6 s a time was off by up to 5 s)."""
    return str(int(t)) if t == int(t) else f"{t:.3f}"


def write_events(res: SimResult, path: str) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["t_s", "job_id", "event", "nodes", "funded"])
        for t, _, _, job_id, event, nodes, funded in res.events:
            w.writerow([format_time(t), job_id, event, nodes, funded])


def plot(res: SimResult, path: str) -> None:
    """Delivered vs budget share per program over time, and the utilisation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    days = [s["t_s"] / 86400 for s in res.samples]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    programs = [n for n in res.tree.top]
    for i, prog in enumerate(sorted(programs, key=lambda n: n.path)):
        color = f"C{i}"
        ax1.plot(
            days,
            [s["delivered"].get(prog.path, 0.0) for s in res.samples],
            color=color,
            label=f"{prog.path} delivered",
        )
        ax1.axhline(
            prog.norm_share, color=color, linestyle="--", linewidth=1, label=f"{prog.path} budget"
        )
    ax1.set_ylabel("share of allocated GPU-hours")
    ax1.set_title(f"Delivered vs budget share per program ({res.policy})")
    ax1.legend(fontsize=7, ncol=2)
    ax2.plot(days, [s["busy_now"] for s in res.samples], label="busy now")
    ax2.plot(days, [s["utilization"] for s in res.samples], label="cumulative utilisation")
    ax2.set_ylim(0, 1.05)
    ax2.set_xlabel("days")
    ax2.set_ylabel("utilisation")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
