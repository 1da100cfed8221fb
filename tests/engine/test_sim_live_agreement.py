"""The simulator and the live loop make the same decisions on the same small scenarios.

The live loop runs as in production — submit through the service, sync the simulated backend,
charge usage, ``scheduling.passes.run_pass`` and its dispatch — on the Django test database,
with the clock moved one pass interval at a time and a pass at every step. The simulator
replays the same trace and passes only at events and one interval after a pass that changed
something. Every start (with its nodes and funding), every preemption and every finish must
match, at the same second: the passes the simulator skips are passes in which the live loop
changes nothing. The driver is ``sim_live.py``; ``test_sim_live_differential.py`` generates
scenarios for it.
"""

import pytest

from scheduling.engine.sim.scenario import ClusterSpec

from .sim_live import HOUR, Case, LiveLoop, job, make_run_pass, sim_events

SCENARIOS = {
    # funded work fills the cluster, more queues behind it, finishes free GPUs
    "queue": (
        [("a", 500), ("b", 500)],
        [
            job("a1", 0, "a", 8, 2 * HOUR),
            job("a2", 0, "a", 4, HOUR),
            job("b1", 0, "b", 8, HOUR),
            job("b2", 600, "b", 4, 3 * HOUR),
            job("a3", 900, "a", 8, HOUR),
        ],
    ),
    # funded work preempts unfunded work at once; the victims come back on what is left
    "unfunded": (
        [("a", 500)],
        [
            job("free1", 0, "", 8, 6 * HOUR),
            job("free2", 0, "", 4, 6 * HOUR),
            job("free3", 0, "", 4, 6 * HOUR),
            job("a1", 1200, "a", 2, HOUR),
            job("a2", 1500, "a", 8, 2 * HOUR),
        ],
    ),
    # fair share: an over-served project's unprotected jobs yield to an idle sibling's
    "standing": (
        [("a", 500), ("b", 500)],
        [
            job("a1", 0, "a", 8, 5 * HOUR, min_runtime=1800),
            job("a2", 0, "a", 8, 5 * HOUR, min_runtime=1800),
            job("a3", 300, "a", 8, 2 * HOUR, min_runtime=1800),
            job("b1", 3600, "b", 8, HOUR, min_runtime=1800),
            job("b2", 3600, "b", 4, HOUR, min_runtime=1800, resumable=False),
        ],
    ),
}


@pytest.fixture
def run_pass(django_capture_on_commit_callbacks, monkeypatch):
    return make_run_pass(django_capture_on_commit_callbacks, monkeypatch)


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_simulator_and_the_live_loop_decide_the_same(name, tmp_path, run_pass):
    budgets, jobs = SCENARIOS[name]
    case = Case(
        clusters=(ClusterSpec("jupiter", "H100", 2, 8),),
        gpu_types={"H100": 1.0},
        budgets=tuple(budgets),
        jobs=tuple(jobs),
        horizon_s=6 * HOUR,
        step_s=300,  # these scenarios were written for a 300 s pass
    )
    live = LiveLoop(case, run_pass, tmp_path)
    expected = live.run()
    assert any(e[2] == "start" for e in expected)
    assert sim_events(case, live.ids) == expected
