"""`manage.py simulate SCENARIO.yaml TRACE.csv --policy P --json OUT.json`: replay a trace.

Thin on purpose: the simulator is the pure package scheduling.engine.sim. This command neither
opens the database nor runs system or migration checks, so it works on a machine with no
database at all.

It replays on the compiled engine when ``make engine`` has built it from the source as it is
now (``scheduling/engine/sim/compiled.py``: the same decisions, about 1.5 times faster), by
running again in place on the build; ``--engine pure`` (or ``ALLOT_ENGINE=pure``) keeps the
pure-Python one, ``--engine compiled`` refuses to run without a fresh build. The JSON is the
same either way (tests/engine/test_compiled_engine.py).
"""

from __future__ import annotations

import json
import os
import sys

from django.core.management.base import BaseCommand, CommandError

from scheduling.engine.sim import InputError, Simulator, compiled, load_scenario, load_trace
from scheduling.engine.sim.output import plot, to_json, write_events

ENGINES = ["auto", "compiled", "pure"]


def _on_the_compiled_engine(engine: str, argv: list[str]) -> None:
    """Run ``django-admin argv`` again in place on the compiled engine when ``engine`` asks
    for it (``auto``: when a fresh build is there). Returns when this process stays."""
    if engine == "pure" or compiled.running():
        return
    if os.environ.get("ALLOT_COMPILED_REEXEC"):  # the build did not load in the new process
        if engine == "compiled":
            raise CommandError("--engine compiled: the compiled engine did not load")
        return
    if engine == "auto" and not compiled.fresh():
        return
    try:
        environ = dict(compiled.env(), ALLOT_COMPILED_REEXEC="1")
    except compiled.BuildError as exc:
        raise CommandError(f"--engine compiled: {exc}") from None
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, "-P", "-c", _AGAIN, *argv], environ)


# The engine imported before Django: Celery's Django fix-up puts the working folder first on
# sys.path when the settings load, which would then find the pure ``scheduling`` there.
_AGAIN = (
    "import sys, scheduling.engine.passes; "
    "from django.core.management import execute_from_command_line; "
    "execute_from_command_line(['django-admin', *sys.argv[1:]])"
)


class Command(BaseCommand):
    help = "Replay a job trace through the scheduling engine in simulated time."
    requires_system_checks: list = []
    requires_migrations_checks = False

    def run_from_argv(self, argv):
        # From the command line only: call_command runs in the caller's process as it is.
        options = self.create_parser(argv[0], argv[1]).parse_args(argv[2:])
        try:
            _on_the_compiled_engine(options.engine, argv[1:])
        except CommandError as exc:
            self.stderr.write(f"CommandError: {exc}", self.style.ERROR)
            sys.exit(1)
        super().run_from_argv(argv)

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
        parser.add_argument(
            "--engine",
            choices=ENGINES,
            default=os.environ.get("ALLOT_ENGINE") or "auto",
            help="the compiled engine (`make engine`) when built (auto, the default), "
            "always, or never (pure); ALLOT_ENGINE sets the default",
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
            f"{result.horizon_s:.0f} s, {result.passes} passes "
            f"({'compiled' if compiled.running() else 'pure'} engine) -> {opts['json_out']}"
        )
