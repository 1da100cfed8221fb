"""Run the whole demo in one terminal: web, Celery workers and beat, on the embedded broker.

Each part is a child process, supervised: one that exits (a crash, an OOM kill, a `kill -9`)
is started again with a log line, after a pause that grows while it keeps crashing (1 s, 2 s,
... 30 s; back to 1 s once it has stayed up a minute). The others keep running meanwhile, so
the web pages answer while the worker comes back. Only Ctrl-C or SIGTERM stops the demo.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.management.base import BaseCommand

STABLE_AFTER_S = 60.0
MAX_BACKOFF_S = 30.0


class Stop(Exception):
    """SIGTERM or SIGINT: stop the demo."""


def _stop(signum, frame):
    raise Stop(signal.Signals(signum).name)


@dataclass
class Child:
    name: str
    command: list[str]
    env: dict
    process: subprocess.Popen | None = None
    started: float = 0.0
    restarts: int = 0
    backoff: float = 1.0
    due: float | None = None  # when a dead child is started again

    def start(self) -> None:
        # Its own session: Ctrl-C reaches the supervisor only, which stops the children in
        # order, rather than each child racing to die and being "restarted" on the way out.
        self.process = subprocess.Popen(self.command, env=self.env, start_new_session=True)
        self.started = time.monotonic()
        self.due = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> None:
        if self.process is None:
            return
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def commands(python: str, host: str, port: int, var) -> dict[str, list[str]]:
    """The children. Two workers: one for the passes, dispatch, sync and charging (the
    default queue), one for what-if previews (their own queue). A replay is pure Python that
    holds the GIL for seconds to minutes, so in the same process, even on another thread, it
    would slow every pass; in its own process it only shares the cores."""
    celery = [python, "-m", "celery", "-A", "portal"]
    worker = [*celery, "worker", "--pool", "threads", "--loglevel", "WARNING"]
    return {
        "web": [python, "manage.py", "runserver", f"{host}:{port}", "--noreload"],
        "worker": [
            *worker,
            "--concurrency",
            "4",
            "--queues",
            settings.CELERY_TASK_DEFAULT_QUEUE,
            "--hostname",
            "allot@%h",
        ],
        "previews": [
            *worker,
            "--concurrency",
            "1",
            "--queues",
            settings.ALLOT_WHATIF_QUEUE,
            "--hostname",
            "previews@%h",
        ],
        "beat": [
            *celery,
            "beat",
            "--loglevel",
            "WARNING",
            "--schedule",
            str(var / "celerybeat-schedule"),
        ],
    }


class Command(BaseCommand):
    help = "Serve the portal with a worker and beat driving the simulated clusters."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", 8000)))
        parser.add_argument("--host", default="127.0.0.1")

    def say(self, message: str) -> None:
        self.stdout.write(f"[rundemo {time.strftime('%H:%M:%S')}] {message}")
        self.stdout.flush()

    def handle(self, *args, port, host, **options):
        from portal import broker

        var = settings.VAR_DIR
        var.mkdir(parents=True, exist_ok=True)
        pruned = broker.prepare()
        if pruned:
            self.say(f"broker: pruned {pruned} delivered messages")
        env = {**os.environ, "ALLOT_DEMO_TRAFFIC": "1"}  # researchers keep submitting
        children = [
            Child(name, command, env)
            for name, command in commands(sys.executable, host, port, var).items()
        ]
        previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            for child in children:
                child.start()
                self.say(f"{child.name} started (pid {child.process.pid})")
            self.stdout.write(
                self.style.SUCCESS(
                    f"Allot is running at http://{host}:{port}/ — log in as leader, manager, "
                    "researcher or admin with password demo. Ctrl-C stops everything."
                )
            )
            self.stdout.flush()
            while True:
                self.supervise(children)
                time.sleep(0.5)
        except Stop as exc:
            self.say(f"{exc}: stopping")
        finally:
            for child in children:
                child.stop()
            for child in children:
                child.wait(timeout=10)
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def supervise(self, children: list[Child]) -> None:
        now = time.monotonic()
        for child in children:
            if child.due is not None:
                if now >= child.due:
                    child.restarts += 1
                    child.start()
                    self.say(
                        f"{child.name} restarted (pid {child.process.pid}, "
                        f"restart #{child.restarts})"
                    )
                continue
            code = child.process.poll()
            if code is None:
                continue
            if now - child.started >= STABLE_AFTER_S:
                child.backoff = 1.0  # it had been up a while: not a crash loop
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            self.say(
                f"{child.name} (pid {child.process.pid}) died ({how}); "
                f"restarting in {child.backoff:.0f} s"
            )
            child.due = now + child.backoff
            child.backoff = min(child.backoff * 2, MAX_BACKOFF_S)
