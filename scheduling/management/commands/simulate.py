"""`manage.py simulate SCENARIO.yaml TRACE.csv --policy P --json OUT.json`: replay a trace.

Thin on purpose: the simulator is the pure package scheduling.engine.sim. This command neither
opens the database nor runs system or migration checks, so it works on a machine with no
database at all.
"""

from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand, CommandError

from scheduling.engine.sim import InputError, Simulator, load_scenario, load_trace
from scheduling.engine.sim.output import plot, to_json, write_events


class Command(BaseCommand):
    help = "Replay a job trace through the scheduling engine in simulated time."
    requires_system_checks: list = []
    requires_migrations_checks = False

    def add_arguments(self, parser):
        parser.add_argument("scenario")
        parser.add_argument("trace")
        parser.add_argument(
            "--policy", choices=["fairshare", "priority", "fifo"], default="fairshare"
        )
        parser.add_argument("--json", dest="json_out", required=True, metavar="OUT.json")
        parser.add_argument("--events", metavar="EVENTS.csv")
        parser.add_argument("--until", type=float, metavar="SECONDS")
        parser.add_argument("--plot", metavar="OUT.png")
        parser.add_argument(
            "--from",
            dest="from_s",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="replay the slice of the trace that starts here (times shift "
            "to start at 0; --until counts from the slice's start)",
        )
        parser.add_argument(
            "--pass-interval",
            type=float,
            default=60.0,
            metavar="SECONDS",
            help="least simulated time between two scheduling passes",
        )

    def handle(self, *args, **opts):
        try:
            scenario = load_scenario(opts["scenario"])
            jobs = load_trace(opts["trace"], opts["until"], opts["from_s"])
        except InputError as exc:
            raise CommandError(str(exc)) from None
        progress, bar = None, None
        if sys.stderr.isatty():
            from tqdm import tqdm

            end = opts["until"] or max((j.submit_s for j in jobs), default=0.0)
            bar = tqdm(total=int(end), unit="sim-s", file=sys.stderr, leave=False)

            def progress(t, bar=bar):
                bar.update(max(0, min(int(t), bar.total) - bar.n))

        sim = Simulator(
            scenario,
            jobs,
            opts["policy"],
            until_s=opts["until"],
            pass_interval_s=opts["pass_interval"],
            record_events=bool(opts["events"]),
            progress=progress,
        )
        result = sim.run()
        if bar is not None:
            bar.close()
        with open(opts["json_out"], "w", encoding="utf-8") as fh:
            json.dump(to_json(result), fh, indent=2)
        if opts["events"]:
            write_events(result, opts["events"])
        if opts["plot"]:
            plot(result, opts["plot"])
        self.stdout.write(
            f"{opts['policy']}: {result.submitted} jobs, horizon "
            f"{result.horizon_s:.0f} s, {result.passes} passes -> {opts['json_out']}"
        )
