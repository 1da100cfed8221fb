"""The replay benchmark: a trace slice per policy, against a baseline engine in the same run.

``python -m scheduling.engine.sim.replay_bench SCENARIO TRACE --from S --until S --repeat N
[--baseline-rev REV [--baseline-repeat M]] [--policies fairshare,priority,fifo]
[--instructions] [--compiled] [--json]``

Each replay runs in a fresh interpreter (no warm caches, no shared heap), one policy at a
time. With ``--baseline-rev`` the engine of that git revision (``scheduling/engine`` exported
to a temporary folder) replays the same slice too, interleaved run by run with the current
one, so both see the same machine load; the report gives the median CPU and wall seconds of
each, their ratio, and whether the two replays' results are identical (a digest of the JSON
output): a speed-up must not change a decision. This machine is shared and its speed drifts,
so only figures measured side by side compare.

``--instructions`` also counts, once per engine and policy, the machine instructions of the
replay alone (``valgrind --tool=callgrind``, minus a run of the same interpreter that loads the
scenario and the trace and stops there): a count does not drift with the machine's load, so
it can tell apart changes of a few per cent that the CPU times, which drift by a fifth within
the hour here, cannot. It is a proxy (memory stalls are not instructions), for small slices:
valgrind runs some 60 times slower than the replay.

``--compiled`` replays the current engine as compiled by ``make engine`` (``sim/compiled.py``:
the same source through mypyc; a build older than the source is refused), and each run
reports which engine it imported (``compiled``: its modules are extension modules).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from scheduling.engine.sim import compiled as compiled_engine
from scheduling.engine.sim.compare import replay_parser

ROOT = Path(__file__).resolve().parents[3]

_ONE = """
import hashlib, json, sys, time
from scheduling.engine.sim.output import to_json
from scheduling.engine.sim.scenario import load_scenario, load_trace
from scheduling.engine.sim.simulator import simulate
import scheduling.engine.passes as passes
scenario, trace, policy, from_s, until = sys.argv[1:6]
sc, jobs = load_scenario(scenario), load_trace(trace, float(until), float(from_s))
if sys.argv[6:] == ["load-only"]:
    sys.exit(0)
t0, c0 = time.perf_counter(), time.process_time()
res = simulate(sc, jobs, policy, until_s=float(until), record_events=False)
cpu, wall = time.process_time() - c0, time.perf_counter() - t0
out = json.dumps(to_json(res), sort_keys=True, default=repr)
print(json.dumps({"cpu_s": cpu, "wall_s": wall, "passes": res.passes,
                  "compiled": not passes.__file__.endswith(".py"),
                  "preemptions": res.preemptions,
                  "digest": hashlib.sha256(out.encode()).hexdigest()[:16]}))
"""


def replay(src: Path, scenario: str, trace: str, policy: str, from_s: float, until: float):
    env = dict(os.environ, PYTHONPATH=str(src))
    args = [sys.executable, "-c", _ONE, scenario, trace, policy, str(from_s), str(until)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=True, cwd=src)
    return json.loads(done.stdout.strip().splitlines()[-1])


_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def instructions(src: Path, scenario: str, trace: str, policy: str, from_s: float, until: float):
    """Instructions of the replay alone: callgrind's count of a whole run minus that of a run
    which stops after loading the scenario and the trace (same interpreter, same inputs)."""
    env = dict(os.environ, PYTHONPATH=str(src), PYTHONHASHSEED="0")
    counts = []
    for tail in (["load-only"], []):
        args = [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-c",
            _ONE,
            scenario,
            trace,
            policy,
            str(from_s),
            str(until),
            *tail,
        ]
        done = subprocess.run(args, env=env, capture_output=True, text=True, check=True, cwd=src)
        found = _COLLECTED.findall(done.stderr)
        if not found:
            raise RuntimeError(f"no instruction count from valgrind: {done.stderr[-500:]}")
        counts.append(int(found[-1]))
    return counts[1] - counts[0]


def export(rev: str, into: Path) -> Path:
    """``scheduling/engine`` of ``rev``, importable from ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "scheduling/engine"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / "scheduling" / "__init__.py").touch()
    return into


def summary(runs: list[dict]) -> dict:
    return {
        "cpu_s": round(statistics.median(r["cpu_s"] for r in runs), 2),
        "wall_s": round(statistics.median(r["wall_s"] for r in runs), 2),
        "cpu_runs_s": [round(r["cpu_s"], 2) for r in runs],
        "passes": runs[0]["passes"],
        "preemptions": runs[0]["preemptions"],
        "digest": runs[0]["digest"],
        "compiled": runs[0]["compiled"],
    }


def bench(args) -> list[dict]:
    scenario, trace = str(Path(args.scenario).resolve()), str(Path(args.trace).resolve())
    current = compiled_engine.require() if args.compiled else ROOT
    with tempfile.TemporaryDirectory() as tmp:
        base = export(args.baseline_rev, Path(tmp)) if args.baseline_rev else None
        if args.baseline_src:  # an engine already exported (or another checkout)
            base = Path(args.baseline_src).resolve()
        runs: dict[tuple[str, str], list[dict]] = {}
        for k in range(args.repeat):
            for policy in args.policies.split(","):
                for name, src in (("current", current), ("baseline", base)):
                    if src is None or (name == "baseline" and k >= args.baseline_repeat):
                        continue
                    got = replay(src, scenario, trace, policy, args.from_s, args.until)
                    runs.setdefault((policy, name), []).append(got)
                    print(policy, name, json.dumps(got), file=sys.stderr, flush=True)
        counted: dict[tuple[str, str], int] = {}
        for policy in args.policies.split(",") if args.instructions else ():
            for name, src in (("current", current), ("baseline", base)):
                if src is not None:
                    n = instructions(src, scenario, trace, policy, args.from_s, args.until)
                    counted[(policy, name)] = n
                    print(policy, name, "instructions", n, file=sys.stderr, flush=True)
    out = []
    for policy in args.policies.split(","):
        row = {"policy": policy, "current": summary(runs[(policy, "current")])}
        if (policy, "current") in counted:
            row["current"]["instructions"] = counted[(policy, "current")]
        if base is not None:
            row["baseline"] = summary(runs[(policy, "baseline")])
            row["ratio_cpu"] = round(row["current"]["cpu_s"] / row["baseline"]["cpu_s"], 3)
            row["same_result"] = row["current"]["digest"] == row["baseline"]["digest"]
            if (policy, "baseline") in counted:
                row["baseline"]["instructions"] = counted[(policy, "baseline")]
                row["ratio_instructions"] = round(
                    counted[(policy, "current")] / counted[(policy, "baseline")], 4
                )
        out.append(row)
    return out


def markdown(rows: list[dict], rev: str | None) -> str:
    which = "current (compiled)" if rows and rows[0]["current"]["compiled"] else "current"
    head = f"| policy | passes | {which} CPU s (median; runs) | {which} wall s |"
    rule = "| --- | --- | --- | --- |"
    if rev:
        head += f" baseline `{rev}` CPU s (median; runs) | current ÷ baseline | same result |"
        rule += " --- | --- | --- |"
    counts = any("instructions" in r["current"] for r in rows)
    if counts:
        head += " current instructions |"
        rule += " --- |"
        if rev:
            head += " baseline instructions | instructions current ÷ baseline |"
            rule += " --- | --- |"
    lines = [head, rule]
    for r in rows:
        c = r["current"]
        runs = " / ".join(f"{x:.1f}" for x in c["cpu_runs_s"])
        line = (
            f"| {r['policy']} | {c['passes']:,} | {c['cpu_s']:.1f} ({runs}) | {c['wall_s']:.1f} |"
        )
        if rev:
            b = r["baseline"]
            bruns = " / ".join(f"{x:.1f}" for x in b["cpu_runs_s"])
            same = "yes" if r["same_result"] else "**no**"
            line += f" {b['cpu_s']:.1f} ({bruns}) | {r['ratio_cpu']:.3f} | {same} |"
        if counts:
            line += f" {c['instructions']:,} |"
            if rev:
                b = r["baseline"]
                line += f" {b['instructions']:,} | {r['ratio_instructions']:.4f} |"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = replay_parser(__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--policies", default="fairshare,priority,fifo")
    ap.add_argument("--baseline-rev", help="git revision whose engine replays side by side")
    ap.add_argument("--baseline-src", help="a folder holding the baseline's scheduling/engine")
    ap.add_argument(
        "--baseline-repeat", type=int, default=3, help="runs of the baseline (at most --repeat)"
    )
    ap.add_argument(
        "--instructions",
        action="store_true",
        help="also count each engine's instructions once per policy (valgrind's callgrind)",
    )
    ap.add_argument(
        "--compiled",
        action="store_true",
        help="replay the current engine as compiled by `make engine` (mypyc)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.instructions and shutil.which("valgrind") is None:
        ap.error("--instructions: valgrind is not installed (Debian package valgrind)")
    try:
        rows = bench(args)
    except compiled_engine.BuildError as e:
        ap.error(f"--compiled: {e}")
    label = args.baseline_rev or args.baseline_src
    print(json.dumps(rows) if args.json else markdown(rows, label))
    return 0


if __name__ == "__main__":
    sys.exit(main())
