"""The live loop at scale (docs/benchmarks.md): a simulated cluster of N nodes × 8 GPUs, the
demo's budget tree and researchers, a backlog of pending jobs of 1–16 GPUs. Times the first
pass (fill), a refill after 10 % of the running jobs are cancelled, a steady pass with nothing
to start, and the queue and operations pages; prints one JSON line.

Each pass is ``run_pass``, what the pass task runs (decision + commit). Fill is timed on
``--repeat`` fresh clusters of the same shape, refill and steady ``--repeat`` times on the
last one; the JSON holds medians (and the starts and SQL queries of the last run of each).
"""

import json
import time

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from scheduling import bench
from scheduling.models import Job


class Command(BaseCommand):
    help = "Benchmark the live scheduling loop on a generated cluster (one JSON line)."

    def add_arguments(self, parser):
        parser.add_argument("--jobs", type=int, default=5000, help="pending jobs (5000)")
        parser.add_argument("--nodes", type=int, default=128, help="8-GPU nodes (128)")
        parser.add_argument("--repeat", type=int, default=3, help="runs per measure (3)")
        parser.add_argument(
            "--history", type=int, default=0, help="finished jobs added before the pages (0)"
        )
        parser.add_argument(
            "--charge-jobs",
            type=int,
            default=5000,
            help="running jobs of the charging run (5000; 0 skips it)",
        )
        parser.add_argument(
            "--force", action="store_true", help="run even if the database already has jobs"
        )

    def handle(self, *args, jobs, nodes, repeat, history, charge_jobs, force, **options):
        if jobs < 1 or nodes < 1 or repeat < 1 or history < 0:
            raise CommandError("--jobs, --nodes and --repeat must be positive")
        if Job.objects.exists() and not force:
            raise CommandError(
                "this database already has jobs: bench_live builds its own scenario and "
                "writes thousands of rows. Point DATABASE_URL at a scratch database, or pass "
                "--force to add a bench cluster beside what is there."
            )
        from budgets.demo import seed

        began = time.perf_counter()
        seed()
        out: dict = {"database": connection.vendor, "nodes": nodes, "gpus": nodes * 8}
        out.update(jobs=jobs, history=history, repeat=repeat)
        with bench.offline_broker(), bench.production_settings():
            fills = []
            for _ in range(repeat):
                cluster = bench.make_cluster(bench.free_cluster_name(), nodes)
                bench.submit_backlog(cluster, jobs)
                fills.append(bench.timed_pass(cluster.pk))
            out.update(self._measure("fill", fills))
            refills = []
            for run in range(repeat):
                bench.cancel_share(cluster, 0.10, seed=run)
                refills.append(bench.timed_pass(cluster.pk))
            out.update(self._measure("refill", refills))
            out.update(
                self._measure("steady", [bench.timed_pass(cluster.pk) for _ in range(repeat)])
            )
            if history:
                bench.add_history(cluster, history)
            out["waiting"] = Job.objects.filter(cluster=cluster, state="pending").count()
            out.update(bench.page_timings(cluster, repeat))
            if charge_jobs:
                out.update(bench.charge_timing(cluster, charge_jobs, repeat))
        out["total_s"] = round(time.perf_counter() - began, 1)
        self.stdout.write(json.dumps(out))

    @staticmethod
    def _measure(name: str, runs: list) -> dict:
        ran = [r for r in runs if r[1].ran]
        if len(ran) != len(runs):
            raise CommandError(f"{name}: a pass was skipped (is another worker scheduling?)")
        return {
            f"{name}_ms": bench.median([ms for ms, _, _ in runs]),
            f"{name}_started": runs[-1][1].started,
            f"{name}_queries": runs[-1][2],
        }
