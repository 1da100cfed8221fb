"""`manage.py rundemo` supervises its processes: kill the demo's worker and it comes back by
itself, with a log line, while the web server keeps answering and the queue keeps moving."""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

pytestmark = pytest.mark.celery


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _manage(env, *args, **kwargs):
    return subprocess.run([sys.executable, "manage.py", *args], env=env, check=True, **kwargs)


def _pass_count(env) -> int:
    """Jobs the live loop has touched: events written by passes (starts, preemptions...)."""
    out = _manage(
        env, "shell", "-c",
        "from scheduling.models import JobEvent; print(JobEvent.objects.count())",
        capture_output=True, text=True,
    )  # fmt: skip
    return int(out.stdout.strip().splitlines()[-1])


def _wait_for(predicate, timeout: float, step: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s")


def test_a_killed_demo_worker_is_restarted_and_the_queue_keeps_moving(tmp_path):
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"}
    }
    env |= {
        "ALLOT_VAR_DIR": str(tmp_path / "var"),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "ALLOT_PASS_INTERVAL_S": "2",
        "ALLOT_SYNC_INTERVAL_S": "2",
        "PYTHONUNBUFFERED": "1",
    }
    _manage(env, "migrate", "--noinput", capture_output=True)
    _manage(env, "seed_demo", capture_output=True)
    port = _free_port()
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "rundemo", "--port", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(demo.stdout), daemon=True).start()
    try:
        pid = int(
            _wait_for(
                lambda: next((m[1] for m in map(re.compile(r"worker started \(pid (\d+)").search,
                                                list(lines)) if m), None),
                60,
            )
        )  # fmt: skip
        _wait_for(lambda: _pass_count(env) > 0, 90, step=2)  # the queue moves

        os.kill(pid, signal.SIGKILL)

        restarted = _wait_for(
            lambda: next((line for line in list(lines) if "worker restarted" in line), None), 30
        )
        assert any(f"worker (pid {pid}) died (killed by SIGKILL)" in line for line in lines)
        assert str(pid) not in restarted
        url = f"http://127.0.0.1:{port}/login/"
        assert urllib.request.urlopen(url, timeout=10).status == 200  # web kept serving
        before = _pass_count(env)
        _wait_for(lambda: _pass_count(env) > before, 120, step=3)  # and the queue still moves
        assert demo.poll() is None  # the demo itself never stopped
    finally:
        demo.send_signal(signal.SIGTERM)
        demo.wait(timeout=30)
    assert any("SIGTERM: stopping" in line for line in lines)
