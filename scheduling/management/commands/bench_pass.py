"""Time live scheduling passes against the current database (e.g. the seeded demo backlog).

Prints one JSON line per cluster with the median of several passes. The first pass (which
starts the backlog) is reported apart from the steady-state ones. Dispatch is not timed: it
happens after commit, in other tasks.
"""

import json
import statistics
import time

from django.core.management.base import BaseCommand

from scheduling.models import Cluster, Job
from scheduling.passes import run_pass


class Command(BaseCommand):
    help = "Median wall time of live scheduling passes per cluster (JSON lines)."

    def add_arguments(self, parser):
        parser.add_argument("--runs", type=int, default=5)

    def handle(self, *args, runs, **options):
        from portal.celery import app

        app.conf.task_always_eager = False
        app.conf.task_ignore_result = True
        for cluster in Cluster.objects.order_by("name"):
            timings = []
            for _ in range(runs + 1):
                began = time.perf_counter()
                run_pass(cluster.pk)
                timings.append((time.perf_counter() - began) * 1000)
            jobs = Job.objects.filter(cluster=cluster)
            self.stdout.write(
                json.dumps(
                    {
                        "cluster": cluster.name,
                        "nodes": cluster.nodes.count(),
                        "pending": jobs.filter(state="pending").count(),
                        "running": jobs.filter(state="running").count(),
                        "first_pass_ms": round(timings[0], 1),
                        "median_ms": round(statistics.median(timings[1:]), 1),
                        "runs": runs,
                    }
                )
            )
