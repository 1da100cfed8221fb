"""`manage.py rundemo` supervises its processes: kill the demo's worker and it comes back by
itself, with a log line, while the web server keeps answering and the queue keeps moving."""

import os
import re
import signal
import urllib.request

import pytest

from tests.portal.livedemo import demo_env, manage, running_demo, seed, wait_for

pytestmark = pytest.mark.celery


def _pass_count(env) -> int:
    """Jobs the live loop has touched: events written by passes (starts, preemptions...)."""
    out = manage(
        env, "shell", "-c",
        "from scheduling.models import JobEvent; print(JobEvent.objects.count())",
        capture_output=True, text=True,
    )  # fmt: skip
    return int(out.stdout.strip().splitlines()[-1])


def test_a_killed_demo_worker_is_restarted_and_the_queue_keeps_moving(tmp_path):
    env = demo_env(tmp_path, ALLOT_SYNC_INTERVAL_S="2")
    seed(env)
    with running_demo(env) as demo:
        lines = demo.lines
        pid = int(
            wait_for(
                lambda: next((m[1] for m in map(re.compile(r"worker started \(pid (\d+)").search,
                                                list(lines)) if m), None),
                60,
            )
        )  # fmt: skip
        wait_for(lambda: _pass_count(env) > 0, 90, step=2)  # the queue moves

        os.kill(pid, signal.SIGKILL)

        restarted = wait_for(
            lambda: next((line for line in list(lines) if "worker restarted" in line), None), 30
        )
        assert any(f"worker (pid {pid}) died (killed by SIGKILL)" in line for line in lines)
        assert str(pid) not in restarted
        url = f"{demo.url}/login/"
        assert urllib.request.urlopen(url, timeout=10).status == 200  # web kept serving
        before = _pass_count(env)
        wait_for(lambda: _pass_count(env) > before, 120, step=3)  # and the queue still moves
        assert demo.process.poll() is None  # the demo itself never stopped
    assert any("SIGTERM: stopping" in line for line in lines)
