"""Compare the three policies on one scenario and trace.

``python -m scheduling.engine.sim.compare SCENARIO TRACE --until S [--from S] --markdown``
prints a table: share distance from the grants, utilisation, p50/p95 wait by job size,
preemptions, what they wasted (lost work and restarts, when the scenario gives preemption a
cost), GPU-hours idle while fundable work could not be placed, and unfunded GPU-hours. The
policies run in parallel processes (one per core); ``--policies priority`` runs only some.
``--compiled`` runs them on the engine compiled by ``make engine`` (``sim/compiled.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from scheduling.engine import passes
from scheduling.engine.sim.output import to_json
from scheduling.engine.sim.scenario import InputError, load_scenario, load_trace
from scheduling.engine.sim.simulator import simulate

POLICIES = ("fairshare", "priority", "fifo")
SIZES = ("1", "2-4", "5-8", ">8")


def run_one(args: tuple) -> dict:
    """One policy, ``repeat`` times: the result of the first run, with the median wall and
    CPU seconds of all (loading the files included)."""
    scenario_path, trace_path, policy, until, from_s, interval, repeat = args
    walls, cpus, out = [], [], {}
    for i in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        scenario = load_scenario(scenario_path)
        jobs = load_trace(trace_path, until, from_s)
        res = simulate(
            scenario, jobs, policy, until_s=until, pass_interval_s=interval, record_events=False
        )
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        if i == 0:
            out = to_json(res)
    out["compiled"] = not str(passes.__file__).endswith(".py")  # (sim/compiled.py)
    out["wall_s"] = round(statistics.median(walls), 1)
    out["cpu_s"] = round(statistics.median(cpus), 1)
    out["cpu_runs_s"] = [round(c, 1) for c in cpus]
    return out


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f}"


def markdown(results: list[dict]) -> str:
    head = ["policy", "share distance", "share distance (active)", "utilisation"]
    head += [f"wait {s} GPU p50/p95 (h)" for s in SIZES]
    head += ["preemptions", "wasted GPU-h", "fragmented GPU-h", "unfunded GPU-h", "CPU (s)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        waits = r["wait_by_size"]
        row = [
            r["policy"],
            f"{r['share_distance']:.3f}",
            f"{r['share_distance_active']:.3f}",
            f"{r['utilization']:.1%}",
        ]
        for s in SIZES:
            w = waits.get(s)
            row.append(f"{_hours(w['wait_p50_s'])} / {_hours(w['wait_p95_s'])}" if w else "-")
        row += [
            str(r["jobs"]["preemptions"]),
            f"{r['wasted_gpu_hours']:.0f}",
            f"{r['fragmentation_gpu_hours']:.0f}",
            f"{r['unfunded_gpu_hours']:.0f}",
            str(r["cpu_s"]),
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def replay_parser(doc: str) -> argparse.ArgumentParser:
    """The arguments every replay of a trace slice takes: scenario, trace and the slice."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("trace")
    ap.add_argument("--until", type=float, required=True)
    ap.add_argument("--from", dest="from_s", type=float, default=0.0)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = replay_parser(__doc__)
    ap.add_argument("--pass-interval", type=float, default=60.0)
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1, help="runs per policy (median times)")
    ap.add_argument("--policies", default=",".join(POLICIES), help="comma-separated subset")
    ap.add_argument(
        "--compiled", action="store_true", help="the engine compiled by `make engine` (mypyc)"
    )
    args = ap.parse_args(argv)
    if args.compiled:
        from scheduling.engine.sim import compiled

        try:  # (returns in the new process, which runs the compiled engine)
            compiled.reexec("scheduling.engine.sim.compare", sys.argv[1:] if argv is None else argv)
        except compiled.BuildError as exc:
            print(f"error: --compiled: {exc}", file=sys.stderr)
            return 2
    try:  # fail fast, in this process, on a bad file
        load_scenario(args.scenario)
        load_trace(args.trace, args.until, args.from_s)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    tasks = [
        (args.scenario, args.trace, p, args.until, args.from_s, args.pass_interval, args.repeat)
        for p in args.policies.split(",")
    ]
    if args.workers > 1:
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            results = list(pool.map(run_one, tasks))
    else:
        results = [run_one(t) for t in tasks]
    if args.markdown:
        print(markdown(results))
    else:
        print(json.dumps([{k: v for k, v in r.items() if k != "projects"} for r in results]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
