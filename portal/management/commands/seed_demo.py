"""Seed the demo organisation: budgets, people and roles, clusters, weeks of finished jobs
with the usage they were charged, and a backlog of jobs.

Idempotent: running it twice leaves one demo organisation. ``--no-history`` leaves out the
finished jobs and their usage (``bench_whatif`` records its own).
"""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils.module_loading import import_string

SEEDERS = ["budgets.demo.seed", "scheduling.demo.seed", "exceptions.demo.seed"]


class Command(BaseCommand):
    help = "Create the demo organisation (users leader, manager, researcher, admin; password demo)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--no-history",
            dest="history",
            action="store_false",
            help="Record no finished jobs and no usage (the live backlog only).",
        )

    def handle(self, *args, **options):
        if not settings.DEBUG:  # its users all have the password "demo": never in production
            raise CommandError("seed_demo runs only with DEBUG=1 (make demo sets it)")
        with transaction.atomic():
            for dotted in SEEDERS:
                try:
                    seeder = import_string(dotted)
                except ImportError:
                    continue
                history = {"history": options["history"]} if dotted == SEEDERS[1] else {}
                summary = seeder(**history)
                if summary:
                    self.stdout.write(summary)
        self.stdout.write(
            self.style.SUCCESS("Demo users: leader, manager, researcher, admin — password: demo")
        )
