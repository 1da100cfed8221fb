"""Time live scheduling passes against the current database (e.g. the seeded demo backlog).

Prints one JSON line per cluster with the median of several passes. The first pass (which
starts the backlog) is reported apart from the steady-state ones. Dispatch is not timed: it
happens after commit, in other tasks (sent to the configured broker: these starts are real).
``bench_live`` builds its own scenario in a scratch database instead; both time the same
``scheduling.bench.timed_pass``.
"""

import json

from django.core.management.base import BaseCommand

from scheduling import bench
from scheduling.models import Cluster, Job


class Command(BaseCommand):
    help = "Median wall time of live scheduling passes per cluster (JSON lines)."

    def add_arguments(self, parser):
        parser.add_argument("--runs", type=int, default=5)

    def handle(self, *args, runs, **options):
        from portal.celery import app

        app.conf.task_always_eager = False
        app.conf.task_ignore_result = True
        for cluster in Cluster.objects.order_by("name"):
            with bench.production_settings():
                timings = [bench.timed_pass(cluster.pk) for _ in range(runs + 1)]
            jobs = Job.objects.filter(cluster=cluster)
            self.stdout.write(
                json.dumps(
                    {
                        "cluster": cluster.name,
                        "nodes": cluster.nodes.count(),
                        "pending": jobs.filter(state="pending").count(),
                        "running": jobs.filter(state="running").count(),
                        "first_pass_ms": round(timings[0][0], 1),
                        "first_pass_queries": timings[0][2],
                        "median_ms": bench.median([ms for ms, _, _ in timings[1:]]),
                        "runs": runs,
                    }
                )
            )
