"""The displacement memory in force, kept from one pass to the next (``PassState._live_memory``)
only while it must be the same: the same memory, running jobs and policy, and no entry's end
crossed by the clock, whichever way it moved. A pass that changes nothing in the memory hands
back the snapshot's own tuple (the simulator then looks for no new memory end)."""

from __future__ import annotations

import random

from scheduling.engine import state
from scheduling.engine.model import Displacement, Policy
from scheduling.engine.passes import run_pass
from scheduling.engine.state import PassState
from tests.engine.helpers import budgets, nodes, run, snap

LEAVES = ("a/x", "a/y", "b/z", "b/w", "c")
TREE = budgets(("a", 1), ("a/x", 1), ("a/y", 1), ("b", 1), ("b/z", 1), ("b/w", 1), ("c", 1))
MEMORY_S = 3600.0


def _forget() -> None:
    state._LAST_MEMORY[:] = [None, None, None, 0.0, -1.0, None, None]


def _fresh(snapshot) -> PassState:
    _forget()
    return PassState(snapshot)


def _case(seed: int):
    rng = random.Random(seed)
    running = tuple(
        run(f"r{i}", rng.choice(LEAVES), 1, f"c-{i % 4:02d}", funded=rng.random() > 0.2)
        for i in range(12)
    )
    displacements = tuple(
        Displacement(
            f"v{k}",
            rng.choice(LEAVES),
            f"r{rng.randrange(14)}",  # r12, r13: displacers no longer running
            rng.choice(LEAVES),
            float(rng.randrange(0, 10_000, 50)),
        )
        for k in range(rng.randrange(1, 10))
    )
    return running, displacements


def test_the_kept_memory_is_the_memory_worked_out_afresh_as_the_clock_moves_both_ways():
    policy = Policy(displacement_memory_s=MEMORY_S)
    kept_hits = recomputed = 0
    for seed in range(40):
        rng = random.Random(1000 + seed)
        running, displacements = _case(seed)
        ends = [d.at_s + MEMORY_S for d in displacements]
        _forget()
        now, last = 5_000.0, None
        for _ in range(30):
            # a walk over the entries' ends, back and forth, landing on them exactly too
            now = rng.choice(ends) if rng.random() < 0.3 else now + rng.uniform(-3000, 3000)
            s = snap(
                nodes(4),
                TREE,
                running=running,
                now=now,
                policy=policy,
                displacements=displacements,
            )
            kept = PassState(s)
            if kept.memory is last:
                kept_hits += 1
            else:
                recomputed += 1
            fresh = _fresh(s)
            assert kept.memory == fresh.memory, (seed, now)
            for project in LEAVES:
                assert kept.shielded_from(project) == fresh.shielded_from(project), (seed, now)
            kept = PassState(s)  # kept from the fresh one: the next step starts from it
            last = kept.memory
    assert kept_hits > 100 and recomputed > 100  # both ways taken, often


def _two_displacers(first_at: float, second_at: float):
    """Two funded runs, each having displaced the other's side: (running, memory)."""
    running = (run("r1", "a/x", 8, "c-00"), run("r2", "b/z", 8, "c-01"))
    memory = (
        Displacement("v1", "b/z", "r1", "a/x", first_at),
        Displacement("v2", "a/x", "r2", "b/z", second_at),
    )
    return running, memory


def _at(now: float, running, memory, policy: Policy):
    return snap(nodes(2), TREE, running=running, now=now, policy=policy, displacements=memory)


def test_other_running_jobs_or_policy_are_not_answered_from_the_kept_memory():
    policy = Policy(displacement_memory_s=MEMORY_S)
    running, memory = _two_displacers(8_000.0, 8_500.0)
    first = _at(9_000.0, running, memory, policy)
    assert len(PassState(first).memory) == 2
    fewer = _at(9_000.0, running[1:], memory, policy)
    assert [m[0] for m in PassState(fewer).memory] == [memory[1]]
    assert len(PassState(first).memory) == 2
    other = _at(9_000.0, running, memory, Policy(displacement_memory_s=700.0))
    assert [m[0] for m in PassState(other).memory] == [memory[1]]


def test_a_pass_that_changes_nothing_in_the_memory_hands_back_the_snapshots_tuple():
    policy = Policy(displacement_memory_s=MEMORY_S)
    running, memory = _two_displacers(1_000.0, 3_000.0)
    assert run_pass(_at(4_000.0, running, memory, policy), details=False).displacements is memory
    # at 4,600 s the first entry has ended: a new tuple without it
    later = run_pass(_at(4_600.0, running, memory, policy), details=False)
    assert later.displacements == (memory[1],)
    # its displacer gone: a new tuple without it
    gone = run_pass(_at(4_000.0, running[1:], memory, policy), details=False)
    assert gone.displacements == (memory[1],)
