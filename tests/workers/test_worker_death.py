"""A worker killed (SIGKILL) in the middle of the live loop, through the real fault points
(core/faults.py), on the shared PostgreSQL: what it held must not outlive it."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from scheduling import passes
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job
from tests.conftest import service_missing
from tests.scheduling.conftest import make_cluster

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]


def _die_at(point: str, code: str, tmp_path) -> int:
    """Run ``code`` in a fresh Django process on this test's database; it SIGKILLs itself at
    ``point``. Returns the exit code."""
    if connection.vendor != "postgresql":
        service_missing("a second process shares the database with the test: needs PostgreSQL")
    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:"
        f"{db['PORT'] or 5432}/{db['NAME']}",
        "ALLOT_FAULT_POINTS": point,
        "ALLOT_VAR_DIR": str(tmp_path / "var"),
        "CELERY_TASK_ALWAYS_EAGER": "1",
    }
    script = "import django; django.setup()\n" + code
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, timeout=120, capture_output=True
    ).returncode


def test_a_worker_killed_holding_the_pass_lock_does_not_stall_the_cluster(researcher, tmp_path):
    cluster = make_cluster(tmp_path)
    job = submit_job(
        researcher,
        JobRequest(name="train", project="nlp/olmo", cluster="jupiter", gpus=8, min_runtime_s=60),
    )
    code = f"from scheduling import passes; passes.run_pass({cluster.pk})"
    assert _die_at("pass.locked", code, tmp_path) == -signal.SIGKILL

    assert passes.run_pass(cluster.pk).ran, "the dead worker's lock still holds the cluster"
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING
