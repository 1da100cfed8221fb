"""`manage.py export_workload --weeks 4 OUT_DIR`: the organisation's recent workload as a
scenario and a trace that `manage.py simulate` replays (see whatif.export)."""

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from whatif.export import export_workload


class Command(BaseCommand):
    help = "Write the recent jobs, clusters and budget tree as OUT_DIR/scenario.yaml + trace.csv."

    def add_arguments(self, parser):
        parser.add_argument("out_dir")
        parser.add_argument("--weeks", type=float, default=4.0)

    def handle(self, *args, **opts):
        if not 0 < opts["weeks"] <= 520:
            raise CommandError("--weeks: give a number of weeks between 0 and 520")
        workload = export_workload(opts["weeks"], timezone.now())
        scenario, trace = workload.write(opts["out_dir"])
        self.stdout.write(
            f"{len(workload.trace)} jobs since {workload.start:%Y-%m-%d %H:%M} UTC -> "
            f"{scenario}, {trace}\n"
            f"replay: python manage.py simulate {scenario} {trace} --until {workload.horizon_s:g} "
            "--json out.json"
        )
