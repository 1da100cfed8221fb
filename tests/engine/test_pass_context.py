"""A pass handed a ``PassContext`` (the queue kept in order between passes, as the simulator
carries it) decides exactly what a pass without one decides.

The context files the snapshot's waiting jobs as they come and go and lets the queue walk pass
over runs of jobs whose fate is settled (``Pass._skip``). A divergence in either would move a
start, a preemption or a hold: each pass of a generated sequence (jobs arriving, starting,
being requeued, usage and ranks moving, ties between users, held and interactive jobs,
several pools) and each pass of two replays is run both ways and compared.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.engine.bench import synthetic_snapshot
from scheduling.engine.model import BudgetNode, Node, PendingJob, RunningJob, Snapshot
from scheduling.engine.pass_context import PassContext
from scheduling.engine.passes import Pass, run_pass
from scheduling.engine.sim import simulator
from scheduling.engine.sim.scenario import load_scenario, load_trace
from tests.engine.golden import random_snapshot

from .test_fast_pass_agreement import decided

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_000_000.0
PHILLY = Path("/work/shared/traces/philly-vc.csv")


def with_context(snapshot, context):
    return Pass(snapshot, details=False, context=context).run()


def evolve(snapshot, rng: random.Random, step: int):
    """The next snapshot of a sequence: some waiting jobs leave (started), some arrive (new
    objects, or copies of jobs that left: a requeue), user usage moves (sometimes to ties)."""
    pending = list(snapshot.pending)
    rng.shuffle(pending)
    keep = pending[: int(len(pending) * rng.uniform(0.6, 1.0))]
    keep.sort(key=lambda j: j.id)  # order of the input must not matter either
    gone = pending[len(keep) :]
    projects = sorted({j.project for j in snapshot.pending} | {""}) or [""]
    for k in range(rng.randint(0, 12)):
        if gone and rng.random() < 0.3:
            keep.append(replace(gone.pop()))  # requeued: an equal job, a new object
            continue
        keep.append(
            PendingJob(
                f"s{step}-{k}",
                rng.choice(projects),
                rng.choice(["u1", "u2", "u3"]),
                rng.choice([1, 1, 1, 2, 4, 8, 16]),
                float(rng.randint(0, 40) * 100),
                rng.choice([0.0, 600.0, 3600.0]),
                kind="interactive" if rng.random() < 0.05 else "batch",
                held=rng.random() < 0.03,
            )
        )
    usage = dict(snapshot.user_usage_gpu_s)
    for j in keep:
        if rng.random() < 0.2:
            usage[(j.project, j.user)] = rng.choice([0.0, 0.0, 1000.0, rng.uniform(0, 5e4)])
    budgets = tuple(
        replace(b, usage_gpu_s=b.usage_gpu_s * rng.uniform(0.5, 1.5)) if rng.random() < 0.3 else b
        for b in snapshot.budgets
    )
    return replace(
        snapshot,
        pending=tuple(keep),
        user_usage_gpu_s=usage,
        budgets=budgets,
        now_s=snapshot.now_s + 60.0,
    )


def crowded_snapshot(seed: int, tight: bool, two_pools: bool):
    """A full cluster and a long queue of few projects and shapes: the walk's memo settles
    most of it, so runs of jobs are passed over (and, with ``tight`` budgets, stop where a
    project can no longer fund its larger liens)."""
    rng = random.Random(seed)
    kinds = [("c", "H100", 1.0)] + ([("c", "A100", 0.5)] if two_pools else [])
    nodes = [Node(f"c-{t}-{i:02d}", c, t, 8) for c, t, _ in kinds for i in range(rng.randint(2, 4))]
    budgets = [BudgetNode("a", 2.0, 0.0, 1e9), BudgetNode("b", 1.0, 0.0, 1e9)]
    leaves = [f"{top}/{k}" for k in range(rng.randint(1, 8)) for top in "ab"]
    for path in leaves:
        money = rng.choice([1e9, 5e5, 8e4, 0.0]) if tight else 1e9
        budgets.append(BudgetNode(path, rng.choice([1.0, 2.0]), rng.uniform(0, 1e5), money))
    running = []
    for n in nodes:  # nearly every GPU busy: some protected, some not, some unfunded
        left = n.gpus - rng.choice([0, 0, 0, 1, 3])
        while left:
            gpus = min(left, rng.choice([1, 2, 4, 8]))
            left -= gpus
            project = rng.choice(leaves + [""])
            running.append(
                RunningJob(
                    f"r{len(running)}",
                    project,
                    "u1",
                    gpus,
                    ((n.name, gpus),),
                    NOW - 7200,
                    NOW + rng.choice([-600.0, 3600.0, 3600.0]),
                    bool(project) and rng.random() < 0.8,
                )
            )
    pending = [
        PendingJob(
            f"p{k:03d}",
            rng.choice(leaves + ["", "ghost/none"]),
            rng.choice(["u1", "u1", "u2"]),
            rng.choice([1, 1, 2, 8, 8, 16]),
            float(rng.randint(0, 30) * 100),
            rng.choice([600.0, 3600.0, 7200.0]),
            kind="interactive" if rng.random() < 0.02 else "batch",
        )
        for k in range(rng.randint(40, 300))
    ]
    return Snapshot(
        NOW,
        tuple(nodes),
        tuple(budgets),
        tuple(running),
        tuple(pending),
        {t: cost for _, t, cost in kinds},
        chain_balances=True,
    )


def waits_other_than_priority(p: Pass) -> dict:
    """Why each job the pass looked at waits, except the Priority waits of jobs the context
    lets the walk pass over: whatever else a pass records (a job left unfunded, ...) the
    skips must not change, even where no decision shows it."""
    return {k: v for k, v in p.funded_fail.items() if v != "Priority"}


def check_sequence(first, seed: int, steps: int) -> int:
    rng = random.Random(seed)
    context, snap, compared = PassContext(), first, 0
    for step in range(steps):
        fast, plain = Pass(snap, details=False, context=context), Pass(snap, details=False)
        assert decided(fast.run()) == decided(plain.run()), f"step {step}"
        assert waits_other_than_priority(fast) == waits_other_than_priority(plain), f"step {step}"
        compared += 1
        snap = evolve(snap, rng, step)
    return compared


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 79), moves=st.integers(0, 10_000))
def test_generated_sequences_decide_the_same_with_and_without_a_context(seed, moves):
    """Seeded random snapshots (several clusters and GPU types, held, interactive and
    unknown-project jobs), each followed by passes over an evolving queue."""
    assert check_sequence(random_snapshot(seed), moves, 6) == 6


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6),
    tight=st.booleans(),
    two_pools=st.booleans(),
    moves=st.integers(0, 10_000),
)
def test_crowded_sequences_decide_the_same_with_and_without_a_context(
    seed, tight, two_pools, moves
):
    """Long queues of few projects and shapes on a full cluster, where most of the walk is
    passed over."""
    assert check_sequence(crowded_snapshot(seed, tight, two_pools), moves, 6) == 6


@pytest.mark.parametrize("seed", [1, 5])
def test_saturated_sequences_decide_the_same_with_and_without_a_context(seed):
    """A saturated bench snapshot: runs of one project's jobs are passed over."""
    check_sequence(synthetic_snapshot(1500, 700, 96, seed=seed), seed, 5)


def test_a_context_follows_a_change_of_policy():
    snap = random_snapshot(3)
    context = PassContext()
    with_context(snap, context)
    other = replace(snap, policy=replace(snap.policy, max_min_runtime_s=600.0))
    assert decided(with_context(other, context)) == decided(run_pass(other, details=False))


def test_a_repeated_job_id_falls_back_to_sorting():
    snap = random_snapshot(7)
    twice = replace(snap, pending=snap.pending + tuple(replace(j) for j in snap.pending[:3]))
    context = PassContext()
    assert decided(with_context(twice, context)) == decided(run_pass(twice, details=False))


def _replay_both_ways(monkeypatch, scenario, jobs, policy, until):
    seen = []
    original = simulator._run_pass

    def both(snapshot, context=None):
        got = original(snapshot, context)
        plain = original(snapshot, None)
        assert decided(got[0]) == decided(plain[0])
        assert got[1] == plain[1]  # stopped at the search budget, or not
        seen.append(got[0])
        return got

    monkeypatch.setattr(simulator, "_run_pass", both)
    simulator.simulate(scenario, jobs, policy, until_s=until, record_events=False)
    return seen


def test_every_pass_of_the_example_replay_decides_the_same_with_its_context(monkeypatch):
    sc = load_scenario(str(ROOT / "examples" / "small.yaml"))
    jobs = load_trace(str(ROOT / "examples" / "small.csv"))
    seen = _replay_both_ways(monkeypatch, sc, jobs, "fairshare", 3 * 86400.0)
    assert any(d.starts for d in seen)


@pytest.mark.skipif(not PHILLY.exists(), reason="the Philly trace is not on this machine")
def test_every_pass_of_two_saturated_philly_days_decides_the_same_with_its_context(monkeypatch):
    sc = load_scenario(str(ROOT / "examples" / "philly-bench.yaml"))
    jobs = load_trace(str(PHILLY), 2 * 86400.0, 3_456_000.0)
    seen = _replay_both_ways(monkeypatch, sc, jobs, "fairshare", 2 * 86400.0)
    assert any(d.preemptions for d in seen) and any(d.reservations for d in seen)
    # passes answered by the repeat memo (pass_repeat) return the last pass's decisions
    assert any(a is b for a, b in zip(seen, seen[1:], strict=False))


def drift(snapshot, rng: random.Random):
    """The next pass over the same jobs: only the clock (across protection ends), the
    windowed usage (ranks and ties among users move) and the balances (liens stop being
    covered, balances run out) change."""
    budgets = tuple(
        replace(
            b,
            usage_gpu_s=b.usage_gpu_s + rng.choice([0.0, 0.0, rng.uniform(0, 4e4)]),
            remaining_gpu_s=b.remaining_gpu_s - rng.choice([0.0, 0.0, rng.uniform(0, 6e4)]),
        )
        for b in snapshot.budgets
    )
    usage = dict(snapshot.user_usage_gpu_s)
    for j in snapshot.pending:
        if rng.random() < 0.05:
            usage[(j.project, j.user)] = usage.get((j.project, j.user), 0.0) + 3600.0
    return replace(
        snapshot,
        budgets=budgets if rng.random() < 0.4 else snapshot.budgets,
        user_usage_gpu_s=usage if rng.random() < 0.4 else snapshot.user_usage_gpu_s,
        now_s=snapshot.now_s + rng.choice([60.0, 300.0, 1800.0, 3600.0]),
    )


def full_snapshot(seed: int, tight: bool, two_pools: bool):
    """``crowded_snapshot`` with every GPU taken by funded work protected for a while (some
    protections end within the sequence): passes that decide nothing, until a protection
    end lets a better-ranked job preempt, or a balance runs out."""
    snap = crowded_snapshot(seed, tight, two_pools)
    rng = random.Random(seed)
    leaves = sorted({b.path for b in snap.budgets if "/" in b.path})
    used: dict[str, int] = {}
    for r in snap.running:
        used[r.nodes[0][0]] = used.get(r.nodes[0][0], 0) + r.gpus
    running = [
        replace(
            r,
            project=r.project or leaves[0],
            funded=True,
            protected_until_s=NOW + rng.choice([1800.0, 5400.0, 36000.0, 36000.0]),
        )
        for r in snap.running
    ]
    for n in snap.nodes:
        if used.get(n.name, 0) < n.gpus:
            gpus = n.gpus - used.get(n.name, 0)
            running.append(
                RunningJob(
                    f"f-{n.name}",
                    rng.choice(leaves),
                    "u2",
                    gpus,
                    ((n.name, gpus),),
                    NOW,
                    NOW + 36000.0,
                    True,
                )
            )
    return replace(snap, running=tuple(running))


def repeats_checked(seed: int, tight: bool, two_pools: bool, moves: int) -> int:
    """Passes over one set of jobs as the simulator runs them (``_run_pass`` with a context,
    so the repeat memo answers what it can), each against a full pass; how many the memo
    answered."""
    rng = random.Random(moves)
    snap, context, last, repeated = full_snapshot(seed, tight, two_pools), PassContext(), None, 0
    for step in range(8):
        got = simulator._run_pass(snap, context)
        plain = simulator._run_pass(snap, None)
        assert decided(got[0]) == decided(plain[0]), f"step {step}"
        assert got[1] == plain[1], f"step {step}"
        repeated += got[0] is last
        last = got[0]
        snap = drift(snap, rng)
    return repeated


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6),
    tight=st.booleans(),
    two_pools=st.booleans(),
    moves=st.integers(0, 10_000),
)
def test_passes_where_only_the_clock_usage_and_balances_move_decide_as_full_passes(
    seed, tight, two_pools, moves
):
    repeats_checked(seed, tight, two_pools, moves)


def test_the_repeat_memo_answers_some_of_those_passes():
    assert sum(repeats_checked(seed, seed % 2 == 0, seed % 3 == 0, seed) for seed in range(12))


@pytest.mark.parametrize("policy", ["priority", "fifo"])
def test_every_pass_of_the_example_replay_decides_the_same_with_its_context_under_a_baseline(
    monkeypatch, policy
):
    """A baseline's queue comes from the context too (``PassContext.flat_queue``)."""
    sc = load_scenario(str(ROOT / "examples" / "small.yaml"))
    jobs = load_trace(str(ROOT / "examples" / "small.csv"))
    seen = _replay_both_ways(monkeypatch, sc, jobs, policy, 3 * 86400.0)
    assert any(d.starts for d in seen)


@pytest.mark.skipif(not PHILLY.exists(), reason="the Philly trace is not on this machine")
@pytest.mark.parametrize("policy", ["priority", "fifo"])
def test_every_pass_of_two_philly_days_decides_the_same_with_its_context_under_a_baseline(
    monkeypatch, policy
):
    sc = load_scenario(str(ROOT / "examples" / "philly-bench.yaml"))
    jobs = load_trace(str(PHILLY), 2 * 86400.0, 3_456_000.0)
    seen = _replay_both_ways(monkeypatch, sc, jobs, policy, 2 * 86400.0)
    assert any(d.starts for d in seen)
