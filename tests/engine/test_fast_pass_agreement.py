"""A pass without details (the simulator's) decides exactly what a full pass decides.

``run_pass(snapshot, details=False)`` leaves out the pending reasons and the explanations, and
its shortcuts for a saturated queue (a job's fate reused for every job of its shape until
something changes, ``Pass._quiet``) must not change what it decides. Every decision must match
the full pass: on the seeded random snapshots of the golden test, on saturated bench snapshots under
every policy, and on every snapshot a replay of the Philly slice hands the engine.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from scheduling.engine.bench import synthetic_snapshot
from scheduling.engine.passes import run_pass
from scheduling.engine.sim import simulator
from scheduling.engine.sim.replay_check import decided
from scheduling.engine.sim.scenario import load_scenario, load_trace
from tests.engine.golden import random_snapshot

ROOT = Path(__file__).resolve().parents[2]
PHILLY = Path("/work/shared/traces/philly-vc.csv")


def agree(snapshot):
    assert decided(run_pass(snapshot, details=False)) == decided(run_pass(snapshot))


@pytest.mark.parametrize("seed", range(80))
def test_random_snapshots_get_the_same_decisions_without_details(seed):
    agree(random_snapshot(seed))


@pytest.mark.parametrize("policy", ["fairshare", "priority", "fifo"])
@pytest.mark.parametrize("seed", [1, 5, 11])
def test_saturated_bench_snapshots_get_the_same_decisions_without_details(policy, seed):
    snap = synthetic_snapshot(1500, 700, 96, seed=seed)
    agree(replace(snap, policy=replace(snap.policy, name=policy)))


def _checked_replay(monkeypatch, scenario, jobs, policy, until):
    seen = []
    original = simulator._run_pass

    def both(snapshot, context=None):
        got = original(snapshot, context)
        assert decided(got[0]) == decided(run_pass(snapshot))
        seen.append(got[0])
        return got

    monkeypatch.setattr(simulator, "_run_pass", both)
    simulator.simulate(scenario, jobs, policy, until_s=until, record_events=False)
    return seen


@pytest.mark.parametrize("policy", ["fairshare", "fifo"])
def test_every_pass_of_the_example_replay_agrees_with_the_full_pass(monkeypatch, policy):
    sc = load_scenario(str(ROOT / "examples" / "small.yaml"))
    jobs = load_trace(str(ROOT / "examples" / "small.csv"))
    seen = _checked_replay(monkeypatch, sc, jobs, policy, 3 * 86400.0)
    assert any(d.starts for d in seen)


@pytest.mark.skipif(not PHILLY.exists(), reason="the Philly trace is not on this machine")
def test_every_pass_of_three_saturated_philly_days_agrees_with_the_full_pass(monkeypatch):
    """Days 40 to 43 of the trace on 32 nodes: a backlog of hundreds, preemptions, held nodes."""
    sc = load_scenario(str(ROOT / "examples" / "philly-bench.yaml"))
    jobs = load_trace(str(PHILLY), 3 * 86400.0, 3_456_000.0)
    seen = _checked_replay(monkeypatch, sc, jobs, "fairshare", 3 * 86400.0)
    assert any(d.preemptions for d in seen) and any(d.reservations for d in seen)
