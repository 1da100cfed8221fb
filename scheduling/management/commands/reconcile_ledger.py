import sys
from datetime import datetime

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from scheduling.backends.base import BackendUnavailable
from scheduling.ledger_check import differences
from scheduling.models import Cluster


class Command(BaseCommand):
    help = (
        "Compare what Allot charged for each finished attempt with the backend's own record; "
        "print each difference above the tolerance and exit 1 if there is one, 0 if none."
    )

    def add_arguments(self, parser):
        parser.add_argument("--cluster", help="one cluster by name (default: every cluster)")
        parser.add_argument("--since", help="only attempts started at or after this ISO time")
        parser.add_argument(
            "--tolerance", type=float, default=0.01, help="GPU-hours per attempt (0.01)"
        )

    def handle(self, *args, cluster, since, tolerance, **kwargs):
        clusters = Cluster.objects.order_by("name")
        if cluster:
            clusters = clusters.filter(name=cluster)
            if not clusters.exists():
                raise CommandError(f"cluster: no cluster named {cluster!r}")
        start = None
        if since:
            try:
                start = datetime.fromisoformat(since)
            except ValueError:
                raise CommandError(f"since: {since!r} is not an ISO date or time") from None
            if timezone.is_naive(start):
                start = timezone.make_aware(start)
        found = []
        for each in clusters:
            try:
                found += differences(each, start, int(tolerance * 3600))
            except BackendUnavailable as exc:
                raise CommandError(f"cluster: {each.name} does not answer: {exc}") from None
        for difference in found:
            self.stdout.write(str(difference))
        if found:
            sys.exit(1)
        self.stdout.write("no difference above the tolerance")
