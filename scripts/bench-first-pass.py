#!/usr/bin/env python3
"""How long the demo's first scheduling passes hold SQLite's write lock (docs/failure-modes.md).

    scripts/bench-first-pass.py [--repeat 3] [--per-transaction N]

Each repetition: a fresh SQLite demo database under a temporary directory (`migrate`,
`seed_demo`: the whole backlog waits), then one pass per cluster, as beat's first tick runs
them, in a process that times every write transaction (from `BEGIN IMMEDIATE` to its commit
or rollback). Prints per repetition the longest write transaction and the sum, per cluster,
and the medians. Nothing else may run against that database meanwhile, so the figure is the
pass's own, not its waits. ``--per-transaction`` overrides
``scheduling.passes.STARTS_PER_TRANSACTION`` (a huge number: the whole pass in one transaction,
as before it was split).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, os, time
import django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup()
from core.sqlite import base
held, began = [], {}
start = base.DatabaseWrapper._start_transaction_under_autocommit
set_auto = base.DatabaseWrapper._set_autocommit
def traced_start(self):
    start(self)
    began[id(self)] = time.perf_counter()
def traced_set(self, autocommit):
    set_auto(self, autocommit)
    if autocommit and id(self) in began:
        held.append(time.perf_counter() - began.pop(id(self)))
base.DatabaseWrapper._start_transaction_under_autocommit = traced_start
base.DatabaseWrapper._set_autocommit = traced_set
from scheduling import passes
from scheduling.models import Cluster
if os.environ.get("BENCH_PER_TRANSACTION"):
    passes.STARTS_PER_TRANSACTION = int(os.environ["BENCH_PER_TRANSACTION"])
out = {}
for cluster in Cluster.objects.order_by("name"):
    held.clear()
    t0 = time.perf_counter()
    result = passes.run_pass(cluster.pk)
    out[cluster.name] = {"started": result.started, "transactions": len(held),
                         "longest_s": max(held, default=0), "sum_s": sum(held),
                         "pass_s": time.perf_counter() - t0}
print(json.dumps(out))
"""


def one_run(per_transaction: int | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "CELERY_BROKER_URL"}}
        env |= {"DATABASE_URL": f"sqlite:///{tmp}/db.sqlite3", "ALLOT_VAR_DIR": f"{tmp}/var",
                "DEBUG": "1"}  # fmt: skip
        if per_transaction:
            env["BENCH_PER_TRANSACTION"] = str(per_transaction)
        for args in (["migrate", "--noinput"], ["seed_demo"]):
            subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True,
                           capture_output=True)  # fmt: skip
        probe = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, check=True,
                               capture_output=True, text=True)  # fmt: skip
        return json.loads(probe.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--per-transaction", type=int)
    args = parser.parse_args()
    runs = []
    for _ in range(args.repeat):
        runs.append(one_run(args.per_transaction))
        print(json.dumps(runs[-1]), flush=True)
    for name in runs[0]:
        for key in ("longest_s", "sum_s", "pass_s"):
            values = [run[name][key] for run in runs]
            print(f"{name} {key}: median {statistics.median(values):.3f} s of {values}")
        print(f"{name} started {runs[0][name]['started']}, transactions "
              f"{[run[name]['transactions'] for run in runs]}")  # fmt: skip


if __name__ == "__main__":
    main()
