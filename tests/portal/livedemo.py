"""The demo as `make demo` runs it, for the tests that need it live: a SQLite database and the
embedded broker under tmp_path, migrated and seeded, and `manage.py rundemo` on a free port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def manage(env, *args, **kwargs):
    return subprocess.run([sys.executable, "manage.py", *args], env=env, check=True, **kwargs)


def wait_for(predicate, timeout: float, step: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s")


def demo_env(tmp_path, **extra: str) -> dict[str, str]:
    """The environment of a fresh demo under ``tmp_path``: none of the suite's PostgreSQL,
    Redis or broker, a pass every 2 s, and ``extra``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"}
    }
    return env | {
        "ALLOT_VAR_DIR": str(tmp_path / "var"),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "ALLOT_PASS_INTERVAL_S": "2",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


def seed(env) -> None:
    """What `make demo` does before it serves: migrate, then seed the demo organisation."""
    manage(env, "migrate", "--noinput", capture_output=True)
    manage(env, "seed_demo", capture_output=True)


@dataclass
class Demo:
    port: int
    process: subprocess.Popen
    lines: list[str] = field(default_factory=list)  # rundemo's output so far, web and workers

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def running_demo(env):
    """`manage.py rundemo` on a free port, its output collected in ``Demo.lines``; stopped
    with SIGTERM (as Ctrl-C would) on the way out."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "manage.py", "rundemo", "--port", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    demo = Demo(port, process)
    threading.Thread(target=lambda: demo.lines.extend(process.stdout), daemon=True).start()
    try:
        yield demo
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
