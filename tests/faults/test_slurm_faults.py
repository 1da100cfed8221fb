"""The same live loop and the same checks on the project's real Slurm (scripts/slurm-up.sh),
while workers die, slurmctld restarts (warm: it keeps its jobs), and Redis and PostgreSQL
restart. On Slurm, "launched twice" is counted in squeue: Slurm jobs per attempt key.

The harness is shared by every Slurm test: this one holds the Slurm test lock exclusively and
restarts only slurmctld. It runs last (its file sorts after the simulated one)."""

import fcntl
import os
import subprocess
import uuid

import pytest

from tests.backends.test_slurm_cluster import LOCK, controller_answers
from tests.conftest import service_missing
from tests.faults.conftest import SETTLE_S
from tests.faults.harness import ROOT
from tests.faults.rounds import run_rounds

pytestmark = [pytest.mark.faults, pytest.mark.slurm]
ROUNDS = int(os.environ.get("ALLOT_FAULT_SLURM_ROUNDS", "3"))
KILLS_PER_ROUND = int(os.environ.get("ALLOT_FAULT_SLURM_KILLS_PER_ROUND", "6"))
CONTROLLER_BACK_S = 10


def _harness(*args: str) -> None:
    subprocess.run(
        ["bash", str(ROOT / "scripts" / args[0]), *args[1:]],
        check=True, timeout=180, capture_output=True,
    )  # fmt: skip


def restart_slurmctld() -> None:
    """Stop only the controller (jobs keep running under slurmd), then bring it back warm."""
    _harness("slurm-down.sh", "--controller")
    _harness("slurm-up.sh")


def test_nothing_is_lost_or_launched_twice_on_slurm_while_everything_restarts(fault_lab):
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # we restart the controller: no other Slurm test now
        if not controller_answers():
            service_missing("no Slurm controller answers `scontrol ping` (run scripts/slurm-up.sh)")
        name = f"faults-{uuid.uuid4().hex[:6]}"
        system = fault_lab.system(
            name, "slurm", {"command_timeout": "20"}, cost_factor="2.000", seed=22
        )
        # A slurmctld restarted late in a round takes seconds to answer again, and an sbatch
        # sent meanwhile waits for it: the repairs that need the controller get that long more.
        system.settle_s = SETTLE_S + CONTROLLER_BACK_S
        try:
            restarts = [
                ("slurmctld", restart_slurmctld),
                ("redis", fault_lab.redis.restart),
                ("postgres", lambda: fault_lab.pg.restart("immediate")),
            ]
            report = run_rounds(
                system, restarts, sim=False, seed=22, jobs_per_round=6, max_job_s=8,
                rounds=ROUNDS, kills_per_round=KILLS_PER_ROUND,
            )  # fmt: skip
        finally:
            fault_lab.teardown_system(system)
            _cancel_all(name)
    assert report["kills"]["total"] >= ROUNDS * KILLS_PER_ROUND
    assert not report["violations"], "\n".join(report["violations"][:60])


def _cancel_all(cluster: str) -> None:
    """Leave the shared Slurm as we found it: cancel every job this test's cluster tagged."""
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i %k"], capture_output=True, text=True, timeout=60
    ).stdout
    ids = [line.split()[0] for line in out.splitlines() if f"cluster={cluster}:" in line]
    if ids:
        subprocess.run(["scancel", *ids], timeout=60, check=False)
