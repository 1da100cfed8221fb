"""The queue walk's memo decides what the walk without it decides.

A job that waited because nothing fits its pools and no victim search can help there
(``Pass._quiet``, ``_hopeless``; under a baseline, no placement) settles every later job of its
shape without the slow path, until the pass's ``epoch`` moves (``waits`` in ``Pass.run``).
A failed victim search does not move it: it only takes options away (a search budget used, a
smaller size that found nothing), so a shape that waited still waits. Here every job takes
the slow path instead (nothing is recorded) and the two walks must agree on every decision,
every recorded wait and every victim search made: on the seeded random snapshots of the
golden test, on saturated bench snapshots under every policy, and on every pass of two
saturated Philly days.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from scheduling.engine.bench import synthetic_snapshot
from scheduling.engine.model import BudgetNode, Node, PendingJob, RunningJob, Snapshot
from scheduling.engine.passes import Pass
from scheduling.engine.sim import simulator
from scheduling.engine.sim.scenario import load_scenario, load_trace
from tests.engine.golden import random_snapshot

ROOT = Path(__file__).resolve().parents[2]
PHILLY = Path("/work/shared/traces/philly-vc.csv")


def walked(snapshot, details: bool, memo: bool) -> tuple:
    p = Pass(snapshot, details)
    if not memo:
        slow = p._try_funded

        def every_job_on_the_slow_path(job):
            got = slow(job)
            p.waits_in = None  # nothing recorded: no later job of its shape is settled
            return got

        p._try_funded = every_job_on_the_slow_path
    d = p.run()
    pools = {id(pool): key for key, pool in p.st.pools.items()}
    searches = sorted((pools[k], n) for k, n in p.searches.items())
    return (
        d.starts,
        d.preemptions,
        d.reservations,
        d.defunded,
        d.pending,
        searches,
        p.funded_fail if details else None,
    )


def agree(snapshot, details: bool = True) -> None:
    assert walked(snapshot, details, memo=True) == walked(snapshot, details, memo=False)


@pytest.mark.parametrize("seed", range(80))
def test_random_snapshots_walk_the_same_with_and_without_the_memo(seed):
    agree(random_snapshot(seed))


@pytest.mark.parametrize("policy", ["fairshare", "priority", "fifo"])
@pytest.mark.parametrize("seed", [1, 5, 11])
def test_saturated_bench_snapshots_walk_the_same_with_and_without_the_memo(policy, seed):
    snap = synthetic_snapshot(1500, 700, 96, seed=seed)
    agree(replace(snap, policy=replace(snap.policy, name=policy)))


@pytest.mark.skipif(not PHILLY.exists(), reason="the Philly trace is not on this machine")
def test_every_pass_of_two_saturated_philly_days_walks_the_same_without_the_memo(monkeypatch):
    original = simulator._run_pass
    checked = []

    def both(snapshot, context=None):
        agree(snapshot, details=False)
        checked.append(snapshot.now_s)
        return original(snapshot, context)

    monkeypatch.setattr(simulator, "_run_pass", both)
    sc = load_scenario(str(ROOT / "examples" / "philly-bench.yaml"))
    jobs = load_trace(str(PHILLY), 2 * 86400.0, 3_456_000.0)
    simulator.simulate(sc, jobs, "fairshare", until_s=2 * 86400.0, record_events=False)
    assert len(checked) > 100


def test_a_job_of_the_same_shape_but_a_shorter_protection_may_still_backfill_a_hold():
    """The walk keeps a wait that came from a failed backfill of a held node (its pool
    blocked, no search left to it) for the shape *and* the lien: the backfill rule reads the
    protection. Node n0 is held for h (8 GPUs, from when low's job there ends, in 600 s)
    with 2 GPUs free; m's first job searches and finds nothing, its second (protected an
    hour) may not backfill the hold, its third (protected 300 s, ending before the hold
    starts) may and starts there."""
    now = 10_000.0
    nodes = (Node("n0", "c", "V100", 8), Node("n1", "c", "V100", 8))
    budgets = (
        BudgetNode("high", 1.0, 0.0, 1e9),
        BudgetNode("low", 1.0, 50.0, 1e9),
        BudgetNode("mid", 1.0, 50.0, 1e9),
    )
    running = (
        RunningJob("r0", "low", "u", 6, (("n0", 6),), 0.0, now + 600, True),
        RunningJob("r1", "low", "u", 8, (("n1", 8),), 0.0, now + 3600, True),
    )
    pending = (
        PendingJob("h", "high", "a", 8, 1.0, 3600.0),
        PendingJob("m0", "mid", "b", 2, 2.0, 3600.0),
        PendingJob("m1", "mid", "c", 2, 3.0, 3600.0),
        PendingJob("m2", "mid", "d", 2, 4.0, 300.0),
    )
    snap = Snapshot(now, nodes, budgets, running, pending, chain_balances=True)
    with_memo = walked(snap, details=True, memo=True)
    assert [s.job_id for s in with_memo[0]] == ["m2"]
    assert with_memo == walked(snap, details=True, memo=False)
