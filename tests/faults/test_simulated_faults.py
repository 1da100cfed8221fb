"""The live loop on PostgreSQL + Redis + real Celery workers and beat, on the simulated backend,
while workers die by SIGKILL at random moments and at named fault points, and Redis and
PostgreSQL restart. Nothing may be lost, launched twice, mischarged or left holding a lien."""

import pytest

from tests.faults.conftest import KILLS_PER_ROUND, ROUNDS
from tests.faults.rounds import run_rounds

pytestmark = pytest.mark.faults


def test_nothing_is_lost_doubled_or_mischarged_while_workers_redis_and_postgres_die(fault_lab):
    options = {"nodes": "3", "gpus_per_node": "8", "speed": "60",
               "state_dir": str(fault_lab.root / "sim")}  # fmt: skip
    # A cost factor other than 1 so that the ledger check is occupancy x cost, not occupancy.
    system = fault_lab.system("sim", "simulated", options, cost_factor="2.000", seed=16)
    try:
        restarts = [
            ("redis", fault_lab.redis.restart),
            ("postgres", lambda: fault_lab.pg.restart("immediate")),
        ]
        report = run_rounds(system, restarts, sim=True, seed=16)
    finally:
        fault_lab.teardown_system(system)
    assert report["kills"]["total"] >= ROUNDS * KILLS_PER_ROUND
    assert not report["violations"], "\n".join(report["violations"][:60])
