"""Seed the demo organisation: budgets, people and roles, clusters, and a backlog of jobs.

Idempotent: running it twice leaves one demo organisation.
"""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils.module_loading import import_string

SEEDERS = ["budgets.demo.seed", "scheduling.demo.seed", "exceptions.demo.seed"]


class Command(BaseCommand):
    help = "Create the demo organisation (users leader, manager, researcher, admin; password demo)."

    def handle(self, *args, **options):
        if not settings.DEBUG:  # its users all have the password "demo": never in production
            raise CommandError("seed_demo runs only with DEBUG=1 (make demo sets it)")
        with transaction.atomic():
            for dotted in SEEDERS:
                try:
                    seeder = import_string(dotted)
                except ImportError:
                    continue
                summary = seeder()
                if summary:
                    self.stdout.write(summary)
        self.stdout.write(
            self.style.SUCCESS("Demo users: leader, manager, researcher, admin — password: demo")
        )
