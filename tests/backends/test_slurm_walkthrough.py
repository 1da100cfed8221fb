"""docs/slurm.md's walk-through, run as written: its ``sh slurm-walkthrough`` blocks, in order,
in one shell, from an empty database to a job running in Slurm as its owner. The doc cannot
drift from what works: a changed command, option or output breaks this test."""

import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.backends.test_slurm_cluster import LOCK, controller_answers
from tests.conftest import service_missing

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "slurm.md"
BLOCK = re.compile(r"^```sh slurm-walkthrough\n(.*?)^```$", re.MULTILINE | re.DOTALL)
# Allot's own settings from the test run must not leak into the walk-through's processes.
NOT_INHERITED = (
    "DJANGO_SETTINGS_MODULE",
    "DATABASE_URL",
    "REDIS_URL",
    "CELERY_BROKER_URL",
    "ALLOT_VAR_DIR",
    "ALLOT_CONFIG",
    "ALLOT_URL",
    "ALLOT_TOKEN",
)


def walkthrough_blocks(text: str) -> list[str]:
    return BLOCK.findall(text)


def test_the_walkthrough_blocks_are_found_in_order():
    blocks = walkthrough_blocks(DOC.read_text())
    assert len(blocks) >= 5
    assert blocks[0].startswith("make slurm-up")
    assert "register_cluster" in "".join(blocks) and "--price" in "".join(blocks)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cancel_leftovers(cluster: str) -> None:
    """A failed run must not leave its Slurm job holding the harness's GPUs."""
    listed = subprocess.run(
        ["squeue", "-h", "-o", "%i %k"], capture_output=True, text=True, timeout=20
    )
    ids = [line.split()[0] for line in listed.stdout.splitlines() if f":cluster={cluster}:" in line]
    if ids:
        subprocess.run(["scancel", *ids], timeout=20, check=False)


def test_the_slurm_walkthrough_runs_a_job_in_slurm_as_its_owner(tmp_path):
    if os.geteuid() != 0:
        service_missing("the walk-through runs as root (the harness and sudo need it)")
    blocks = walkthrough_blocks(DOC.read_text())
    script = "set -euo pipefail\n" + "\n".join(blocks)
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    env.update(
        PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}",
        TMPDIR=str(tmp_path),  # mktemp puts the walk-through's Allot here
        PORT=str(free_port()),
    )
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        if not controller_answers():
            service_missing("no Slurm controller answers `scontrol ping` (run scripts/slurm-up.sh)")
        shell = subprocess.Popen(
            ["bash", "-c", script],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # the web and the worker it starts die with it
        )
        try:
            out, _ = shell.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(shell.pid, signal.SIGKILL)
            out, _ = shell.communicate()
            pytest.fail(f"the walk-through did not finish in 300 s:\n{out}")
        finally:
            try:
                os.killpg(shell.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            cancel_leftovers("hpc")
    assert shell.returncode == 0, out
    running = re.search(r"^\s*(\d+)\s+allot-(\d+)-hello\s+(\S+)\s+RUNNING\s+node\d+$", out, re.M)
    assert running, f"squeue never showed the job running:\n{out}"
    assert running.group(3) == "allot-alice"  # its owner's account, not root or Allot's
    assert re.search(r"^State\s+running$", out, re.M), out
    assert f"Job {running.group(2)} (hello) is cancelled." in out
    assert "no cost factor" not in out  # priced at registration: no node was drained
