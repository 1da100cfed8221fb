"""Priority inflation on a real trace: the heaviest teams mark everything urgent.

``python -m scheduling.engine.sim.label TRACE.csv --from S --until S --heaviest 3 > OUT.csv``
writes the slice of the trace submitted in ``[from, from + until]`` (times shifted to start at
0) with a ``priority`` column: every job of the ``--heaviest`` teams (by GPU-hours submitted in
the slice) is ``urgent``, every other job ``normal``. That is what a lab without budgets drifts
to — the teams with the most work learn that the label is free — and it is the baseline the
``priority`` policy should be judged on: on an unlabelled trace it is simply ``fifo``.
The fair-share policy ignores the column, so its results do not change.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict

from scheduling.engine.sim.scenario import TRACE_COLUMNS, load_trace


def heaviest_projects(jobs, n: int) -> list[str]:
    demand: dict[str, float] = defaultdict(float)
    for j in jobs:
        if j.project:
            demand[j.project] += j.gpus * j.duration_s
    return sorted(demand, key=lambda p: (-demand[p], p))[:n]


def _exact(x: float) -> str:
    return str(int(x)) if x == int(x) else repr(x)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--from", dest="from_s", type=float, default=0.0)
    ap.add_argument("--until", type=float, default=None)
    ap.add_argument("--heaviest", type=int, default=3)
    args = ap.parse_args(argv)
    jobs = load_trace(args.trace, args.until, args.from_s)
    urgent = set(heaviest_projects(jobs, args.heaviest))
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow((*TRACE_COLUMNS, "priority"))
    for j in jobs:
        w.writerow(
            (
                j.id,
                _exact(j.submit_s),
                j.project,
                j.user,
                j.gpus,
                _exact(j.duration_s),
                _exact(j.min_runtime_s),
                str(j.resumable).lower(),
                j.kind,
                j.cluster or "",
                "urgent" if j.project in urgent else "normal",
            )
        )
    print(f"urgent: {', '.join(sorted(urgent))}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
