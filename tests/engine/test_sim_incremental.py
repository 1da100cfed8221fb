"""The simulator's incremental bookkeeping equals what it replaces, recomputed from scratch.

Each structure kept up to date as jobs start, stop and arrive (instead of being rebuilt from
every running or waiting job each pass) is checked against the plain computation at every
point of a replay where the simulator reads it: the example lab (drains, an interactive
pool, unfunded work, two clusters of different cost) and two saturated Philly days. A replay
decides from these values, so any drift would show as a changed decision much later; here
it shows at once, with its time.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from pathlib import Path

import pytest

from scheduling.engine import preempt
from scheduling.engine.model import PendingJob
from scheduling.engine.pass_context import Group, _diff, shape
from scheduling.engine.pass_repeat import RepeatMemo
from scheduling.engine.sim import floor as floor_module
from scheduling.engine.sim import simulator
from scheduling.engine.sim import standing as standing_module
from scheduling.engine.sim.scenario import load_scenario, load_trace
from scheduling.engine.state import PassState

ROOT = Path(__file__).resolve().parents[2]
PHILLY = Path("/work/shared/traces/philly-vc.csv")


def example_replay() -> tuple:
    """The example lab: drains, an interactive pool, unfunded work, two clusters (3 days)."""
    scenario = load_scenario(str(ROOT / "examples" / "small.yaml"))
    return scenario, load_trace(str(ROOT / "examples" / "small.csv")), 3 * 86400.0


def philly_days() -> tuple:
    """Two saturated days of the Philly slice from day 40."""
    scenario = load_scenario(str(ROOT / "examples" / "philly-bench.yaml"))
    return scenario, load_trace(str(PHILLY), 2 * 86400.0, 3_456_000.0), 2 * 86400.0


def first_crossing_recomputed(watch, t: float, remaining: dict | None) -> float:
    """The floor watch as it was: every funded running job, every call."""
    sim = watch.sim
    drains: dict[str, list[tuple[float, float]]] = {}
    for r in sim.running.values():
        if not r.funded:
            continue
        rate = r.gpus * sim.node_cost[r.nodes[0][0]]
        for anc in sim.up.get(r.project, ()):
            drains.setdefault(anc, []).append((max(t, r.protected_until_s), rate))
    if not drains:
        return math.inf
    if remaining is None:
        remaining = sim.remaining(t)
    targets = watch._targets()
    first = math.inf
    for node, parts in drains.items():
        left = remaining.get(node, math.inf)
        target = 0.0
        if left > 0:
            values = targets.get(node, ())
            k = bisect_right(values, left)
            target = values[k - 1] if k else 0.0
        left -= target
        rate, at = 0.0, t
        for start, r in sorted(parts) + [(math.inf, 0.0)]:
            if rate > 0 and at + left / rate <= start:
                first = min(first, at + left / rate)
                break
            if start == math.inf:
                break
            left -= rate * (start - at)
            at, rate = start, rate + r
    return max(first, t)


def replay_checking_the_floor(monkeypatch, scenario, jobs, until) -> int:
    kept = floor_module.BudgetFloor._first_crossing
    checked = []

    def both(watch, t, remaining=None):
        got = kept(watch, t, remaining)
        assert got == first_crossing_recomputed(watch, t, remaining), t
        checked.append(got)
        return got

    monkeypatch.setattr(floor_module.BudgetFloor, "_first_crossing", both)
    simulator.simulate(scenario, jobs, "fairshare", until_s=until, record_events=False)
    return sum(1 for t in checked if t < math.inf)


@pytest.mark.parametrize("seed", range(200))
def test_the_queue_diff_equals_the_set_difference(seed):
    rng = random.Random(seed)
    # short queues, and long ones with a few gaps whose runs span several of _same_for's
    # windows (64, 128, ... objects)
    long = seed % 2 == 0
    objects = [object() for _ in range(rng.randint(0, 1200 if long else 60))]
    old = [x for x in objects if rng.random() < 0.7]
    keep = 1 - rng.randint(0, 12) / max(len(old), 1) if long else 0.9
    new = [x for x in old if rng.random() < keep]
    if rng.random() < 0.3:  # a few moved
        for _ in range(rng.randint(1, 3)):
            if new:
                new.append(new.pop(rng.randrange(len(new))))
    if rng.random() < 0.1:
        rng.shuffle(new)
    new += [x for x in objects if x not in old and rng.random() < 0.5]
    got = _diff(tuple(old), tuple(new))
    left = {id(x) for x in old} - {id(x) for x in new}
    came = {id(x) for x in new} - {id(x) for x in old}
    if got is None:  # too many mismatches: the caller compares as sets
        return
    assert {id(x) for x in got[0]} == left and len(got[0]) == len(left)
    assert {id(x) for x in got[1]} == came and len(got[1]) == len(came)


def test_the_contexts_liens_per_project_equal_those_recomputed_at_every_pass(monkeypatch):
    """``PassContext.bases`` (kept as jobs are filed and dropped) against the waiting jobs'
    distinct GPUs x protection per project, read from the whole index, after each pass of
    two saturated Philly days."""
    original = simulator._run_pass
    checked = []

    def checking(snapshot, context):
        got = original(snapshot, context)
        if context.last is snapshot.pending:  # the context was brought up to this snapshot
            expected: dict[str, set[float]] = {}
            for job, _, base in context.by_id.values():
                if job.project:
                    expected.setdefault(job.project, set()).add(base)
            assert context.bases() == {p: sorted(b) for p, b in expected.items()}
            checked.append(snapshot.now_s)
        return got

    monkeypatch.setattr(simulator, "_run_pass", checking)
    sc = load_scenario(str(ROOT / "examples" / "philly-bench.yaml"))
    if not PHILLY.exists():
        pytest.skip("the Philly trace is not on this machine")
    jobs = load_trace(str(PHILLY), 2 * 86400.0, 3_456_000.0)
    simulator.simulate(sc, jobs, "fairshare", until_s=2 * 86400.0, record_events=False)
    assert len(checked) > 100


def test_the_snapshots_shared_tuples_are_the_simulators_jobs_at_every_pass(monkeypatch):
    """The running and waiting jobs handed to a pass are reused between passes until one
    changes (``Accounting._running_now``, ``_pending_now``): at every pass of the example
    replay they are the simulator's current jobs, in its order."""
    kept = simulator.Simulator._snapshot
    checked = []

    def checking(sim, t, remaining):
        snap = kept(sim, t, remaining)
        assert list(snap.running) == list(sim.running.values())
        assert list(snap.pending) == list(sim.pending.values())
        assert all(a is b for a, b in zip(snap.running, sim.running.values(), strict=True))
        assert all(a is b for a, b in zip(snap.pending, sim.pending.values(), strict=True))
        checked.append(t)
        return snap

    monkeypatch.setattr(simulator.Simulator, "_snapshot", checking)
    sc, jobs, _ = example_replay()
    simulator.simulate(sc, jobs, "fairshare", until_s=3 * 86400.0, record_events=False)
    assert len(checked) > 10


def test_the_contexts_groups_equal_those_rebuilt_from_its_index_at_every_pass(monkeypatch):
    """Each (project, user) group keeps its jobs, shapes, liens and shape codes in (submit,
    id) order as jobs come and go (``pass_context.Group.insert``, ``delete``): after every
    pass of two saturated Philly days, every group equals one rebuilt from the context's
    index, each shape the group holds has its own code, and every code marks its shape."""
    if not PHILLY.exists():
        pytest.skip("the Philly trace is not on this machine")
    original = simulator._run_pass
    checked = []

    def checking(snapshot, context):
        got = original(snapshot, context)
        for g in context.groups.values():
            rows = [context.by_id[jid] for _, jid in g.order]
            assert g.jobs == [r[0] for r in rows]
            assert g.keys == [r[1] for r in rows]
            assert g.bases == [r[2] for r in rows]
            counts: dict = {}
            for key in g.keys:
                counts[key] = counts.get(key, 0) + 1
            assert g.count == counts and set(g.ids) == set(counts)
            assert len(set(g.ids.values())) == len(g.ids)  # one code per shape
            assert not g.wide and list(g.codes) == [g.ids[key] for key in g.keys]
            assert g.lane == (None in counts)
            assert g.top() == max(g.bases, default=0.0)
            assert all(context._shapes[key] is key for key in counts if key is not None)
        checked.append(len(context.groups))
        return got

    monkeypatch.setattr(simulator, "_run_pass", checking)
    sc, jobs, _ = philly_days()
    simulator.simulate(sc, jobs, "fairshare", until_s=2 * 86400.0, record_events=False)
    assert len(checked) > 100 and max(checked) >= 5


def test_a_group_with_more_shapes_than_a_byte_tells_apart_is_never_skipped():
    """A group's shape codes are bytes: past 256 shapes at once it is marked ``wide`` (the
    walk then visits its jobs one by one) until it is empty again."""
    g = Group("p")
    jobs = [PendingJob(f"j{n}", "p", "u", n + 1, float(n), 0.0) for n in range(257)]
    for n, job in enumerate(jobs):
        g.insert(n, (job.submit_s, job.id), job, shape(job), 1.0)
        assert g.wide == (n >= 256)
    assert sorted(g.ids.values()) == list(range(257))
    g.delete(256)
    g.delete(0)
    g.insert(0, (0.0, "j0"), jobs[0], shape(jobs[0]), 1.0)
    assert g.ids[shape(jobs[0])] == 0  # the lowest free code
    while g.jobs:
        g.delete(0)
    assert not g.wide and not g.ids and not g.codes


def remaining_recomputed(sim, t: float) -> dict[str, float]:
    """The balances as the simulator counted them before it kept its funded runs' liens
    (``Simulator.liens``): every running job, every call."""
    used: dict[str, float] = {}
    for p, spent in sim.spent.items():
        for anc in sim.up.get(p, ()):
            used[anc] = used.get(anc, 0.0) + spent
    for r in sim.running.values():
        if r.funded and r.protected_until_s > t:
            lien = (r.protected_until_s - t) * r.gpus * sim.node_cost[r.nodes[0][0]]
            for anc in sim.up.get(r.project, ()):
                used[anc] = used.get(anc, 0.0) + lien
    return {p: grant - used.get(p, 0.0) for p, grant in sim.grants.items()}


def replay_checking_the_balances(monkeypatch, scenario, jobs, until) -> int:
    kept = simulator.Simulator.remaining
    checked = []

    def both(sim, t):
        got = kept(sim, t)
        assert got == remaining_recomputed(sim, t), t  # equal floats: summed in one order
        holding = [r.id for r in sim.running.values() if r.funded and r.protected_until_s > t]
        assert [jid for jid, lien in sim.liens.items() if lien[0] > t] == holding
        checked.append(t)
        return got

    monkeypatch.setattr(simulator.Simulator, "remaining", both)
    simulator.simulate(scenario, jobs, "fairshare", until_s=until, record_events=False)
    return len(checked)


def replay_checking_the_victim_rows(monkeypatch, scenario, jobs, until) -> int:
    """Every time a victim search reads the rows kept for its pool (``preempt._rows``,
    kept while ``Pool.stamp`` is unchanged), they equal rows built afresh from the pool."""
    kept = preempt._rows
    checked = []

    def both(st, pool):
        before = st.victim_rows.get(id(pool))
        got = kept(st, pool)
        saved_rows, saved_cache = st.victim_rows, st.victim_cache
        st.victim_rows, st.victim_cache = {}, {}
        try:
            fresh = kept(st, pool)
        finally:
            st.victim_rows, st.victim_cache = saved_rows, saved_cache
        assert got == fresh, st.now
        checked.append(before is not None and before[1] is got)  # read again, not rebuilt
        return got

    monkeypatch.setattr(preempt, "_rows", both)
    simulator.simulate(scenario, jobs, "fairshare", until_s=until, record_events=False)
    assert any(checked)
    return len(checked)


def clock_quiet_recomputed(memo, snap, t0: float, t1: float) -> list | None:
    """``RepeatMemo._clock_quiet`` as it was: every running job, every call."""
    ended = [r for r in snap.running if (t0 >= r.protected_until_s) != (t1 >= r.protected_until_s)]
    until = snap.policy.displacement_memory_s
    for d in snap.displacements:
        if (t0 >= d.at_s + until) != (t1 >= d.at_s + until):
            return None
    return ended if all(h.start_s > t1 for h in memo.decisions.reservations) else None


@pytest.mark.skipif(not PHILLY.exists(), reason="the Philly trace is not on this machine")
def test_the_repeat_memos_kept_protection_ends_and_scaled_liens_equal_recomputed_ones(
    monkeypatch,
):
    """The repeat memo keeps the running jobs sorted by protection end (while they are the
    same) and each project's liens times each cost (while the queue is the same): at every
    check of two saturated Philly days, the runs whose protection ended and the signature
    equal those computed from every job."""
    kept_clock, kept_signature = RepeatMemo._clock_quiet, RepeatMemo._signature
    checked = []

    def clock(memo, snap, t0, t1):
        got = kept_clock(memo, snap, t0, t1)
        plain = clock_quiet_recomputed(memo, snap, t0, t1)
        assert (got is None) == (plain is None)
        if got is not None:
            assert sorted(r.id for r in got) == sorted(r.id for r in plain)
        checked.append(got)
        return got

    def signature(memo, snap, tree, context):
        got = kept_signature(memo, snap, tree, context)
        saved, memo.scaled = memo.scaled, {}
        try:
            assert got == kept_signature(memo, snap, tree, context)
        finally:
            memo.scaled = saved
        return got

    monkeypatch.setattr(RepeatMemo, "_clock_quiet", clock)
    monkeypatch.setattr(RepeatMemo, "_signature", signature)
    sc, jobs, _ = philly_days()
    simulator.simulate(sc, jobs, "fairshare", until_s=2 * 86400.0, record_events=False)
    assert len(checked) > 100 and any(checked)


@pytest.mark.parametrize("policy", ["priority", "fifo"])
def test_a_baselines_queue_kept_in_the_context_equals_the_sorted_one_at_every_pass(
    monkeypatch, policy
):
    """Under a baseline the context keeps the whole queue in the policy's order as jobs come
    and go (``PassContext.flat_queue``): after every pass of the example replay and of two
    Philly days it equals the waiting jobs sorted by ``PassState.order_key``, with their
    shapes, liens and the count of jobs per number of GPUs."""
    original = simulator._run_pass
    checked = []

    def checking(snapshot, context):
        got = original(snapshot, context)
        if context.last is snapshot.pending:
            st = PassState(snapshot)
            queue = st.queue(j for j in snapshot.pending if not j.held)
            assert context.flat_jobs == queue
            assert all(a is b for a, b in zip(context.flat_jobs, queue, strict=True))
            assert context.flat_keys == [shape(j) for j in queue]
            assert context.flat_bases == [j.gpus * st.protection(j) for j in queue]
            assert context.flat_order == [st.order_key(j) for j in queue]
            gpus: dict[int, int] = {}
            for j in queue:
                gpus[j.gpus] = gpus.get(j.gpus, 0) + 1
            assert context.flat_gpus == gpus
            checked.append(len(queue))
        return got

    monkeypatch.setattr(simulator, "_run_pass", checking)
    sc, jobs, _ = example_replay()
    simulator.simulate(sc, jobs, policy, until_s=3 * 86400.0, record_events=False)
    if PHILLY.exists():
        sc = load_scenario(str(ROOT / "examples" / "philly-bench.yaml"))
        jobs = load_trace(str(PHILLY), 2 * 86400.0, 3_456_000.0)
        simulator.simulate(sc, jobs, policy, until_s=2 * 86400.0, record_events=False)
    assert len(checked) > 100 and max(checked) > 10


def lines_recomputed(watch, t: float) -> dict:
    """The standing lines as they were computed: every share and sibling total read anew."""
    sim = watch.sim
    usage: dict[str, float] = {}
    rate: dict[str, float] = {}
    own = sim._usage_now(t)
    for p in sim.shares:
        u = own[p]
        r = sim.rate.get(p, 0.0)
        for anc in watch.up[p]:
            usage[anc] = usage.get(anc, 0.0) + u
            rate[anc] = rate.get(anc, 0.0) + r
    out = {}
    for group in watch.groups:
        total_share = sum(max(n.share, 0.0) for n in group)
        total_usage = sum(usage.get(n.path, 0.0) for n in group)
        total_rate = sum(rate.get(n.path, 0.0) for n in group)
        for n in group:
            s = max(n.share, 0.0)
            g = s * total_usage - total_share * usage.get(n.path, 0.0)
            slope = s * total_rate - total_share * rate.get(n.path, 0.0)
            out[n.path] = (g, slope)
    return out


def replay_checking_the_standing_lines(monkeypatch, scenario, jobs, until) -> int:
    kept = standing_module.Standings._lines
    checked = []

    def both(watch, t):
        got = kept(watch, t)
        assert got == lines_recomputed(watch, t), t
        checked.append(t)
        return got

    monkeypatch.setattr(standing_module.Standings, "_lines", both)
    simulator.simulate(scenario, jobs, "fairshare", until_s=until, record_events=False)
    return len(checked)


# Each kept state, the replay that checks it, and how many reads each replay must check at least.
KEPT = {
    "floor watch": (replay_checking_the_floor, 0, 0),
    "balances": (replay_checking_the_balances, 10, 100),
    "victim rows": (replay_checking_the_victim_rows, 0, 100),
    "standing lines": (replay_checking_the_standing_lines, 0, 0),
}


@pytest.mark.parametrize("kept", KEPT)
def test_each_kept_state_equals_its_recount_over_the_example_replay(monkeypatch, kept):
    check, least, _ = KEPT[kept]
    assert check(monkeypatch, *example_replay()) > least


@pytest.mark.skipif(not PHILLY.exists(), reason="the Philly trace is not on this machine")
@pytest.mark.parametrize("kept", KEPT)
def test_each_kept_state_equals_its_recount_over_two_saturated_philly_days(monkeypatch, kept):
    check, _, least = KEPT[kept]
    assert check(monkeypatch, *philly_days()) > least
