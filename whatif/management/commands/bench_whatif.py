"""`manage.py bench_whatif`: time a four-week preview of the demo organisation (whatif.bench).

Needs `seed_demo --no-history` first (the demo organisation without its own recorded
history, so every run replays the same workload); records the synthetic history once (jobs
named "history"), in a scratch database: it refuses a database with other jobs unless --force.
"""

import json

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from scheduling.models import Job
from whatif import bench


class Command(BaseCommand):
    help = "Time four-week what-if previews of the demo organisation (median of --repeat)."

    def add_arguments(self, parser):
        parser.add_argument("--repeat", type=int, default=3)
        parser.add_argument("--load", type=float, default=1.0)
        parser.add_argument("--force", action="store_true")

    def handle(self, *args, **opts):
        leader = get_user_model().objects.filter(username="leader").first()
        if leader is None:
            raise CommandError(
                "run `manage.py seed_demo --no-history` first (the demo organisation)"
            )
        history = Job.objects.filter(name=bench.NAME)
        if not history.exists():
            if Job.objects.count() > 500 and not opts["force"]:
                raise CommandError(
                    "this database holds jobs: use a scratch one seeded with "
                    "`seed_demo --no-history`, or --force"
                )
            self.stderr.write(f"recorded {bench.record_history(load=opts['load'])} jobs")
        self.stdout.write(json.dumps(bench.time_previews(leader, opts["repeat"])))
