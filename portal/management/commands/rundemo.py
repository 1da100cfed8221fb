"""Run the whole demo in one terminal: web, a Celery worker and beat, on the embedded broker.

Each part is a child process; Ctrl-C (or any child dying) stops them all.
"""

import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Serve the portal with a worker and beat driving the simulated clusters."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", 8000)))
        parser.add_argument("--host", default="127.0.0.1")

    def handle(self, *args, port, host, **options):
        var = settings.VAR_DIR
        for sub in ("broker/out", "broker/processed", "broker/control"):
            (var / sub).mkdir(parents=True, exist_ok=True)
        python = sys.executable
        commands = {
            "web": [python, "manage.py", "runserver", f"{host}:{port}", "--noreload"],
            "worker": [
                python,
                "-m",
                "celery",
                "-A",
                "portal",
                "worker",
                "--pool",
                "threads",
                "--concurrency",
                "4",
                "--loglevel",
                "WARNING",
            ],
            "beat": [
                python,
                "-m",
                "celery",
                "-A",
                "portal",
                "beat",
                "--loglevel",
                "WARNING",
                "--schedule",
                str(var / "celerybeat-schedule"),
            ],
        }
        env = {**os.environ, "ALLOT_DEMO_TRAFFIC": "1"}  # researchers keep submitting
        children = {name: subprocess.Popen(cmd, env=env) for name, cmd in commands.items()}
        self.stdout.write(
            self.style.SUCCESS(
                f"Allot is running at http://{host}:{port}/ — log in as leader, manager, "
                "researcher "
                "or admin with password demo. Ctrl-C stops everything."
            )
        )
        try:
            while all(child.poll() is None for child in children.values()):
                time.sleep(1)
            dead = [name for name, child in children.items() if child.poll() is not None]
            self.stderr.write(f"stopped: {', '.join(dead)} exited")
        except KeyboardInterrupt:
            pass
        finally:
            for child in children.values():
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM)
            for child in children.values():
                try:
                    child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.kill()
