"""Invariants over random snapshots (hypothesis)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.engine import schedule
from scheduling.engine.model import BudgetNode, Node, PendingJob, Policy, RunningJob, Snapshot
from scheduling.engine.tree import FairTree

from .helpers import assert_no_protected_job_preempted

NOW = 50_000.0
PROJECTS = ["a/x", "a/y", "b/z", "c", ""]
CODES = {
    "Priority",
    "Resources",
    "Reservation",
    "Drain",
    "Unfunded",
    "ExceedsCapacity",
    "Held",
    "InteractiveLimit",
}


@st.composite
def snapshots(draw):
    n_nodes = draw(st.integers(1, 5))
    size = draw(st.sampled_from([4, 8]))
    drained = draw(st.sets(st.integers(0, n_nodes - 1), max_size=2))
    node_list = tuple(Node(f"c-{i:02d}", "c", "H100", size, i in drained) for i in range(n_nodes))
    free = [size] * n_nodes
    running = []
    for k in range(draw(st.integers(0, 12))):
        i = draw(st.integers(0, n_nodes - 1))
        if free[i] == 0:
            continue
        gpus = draw(st.integers(1, free[i]))
        free[i] -= gpus
        funded = draw(st.booleans())
        project = (
            draw(st.sampled_from(PROJECTS[:-1])) if funded else draw(st.sampled_from(PROJECTS))
        )
        running.append(
            RunningJob(
                f"r{k}",
                project,
                draw(st.sampled_from("uvw")),
                gpus,
                ((node_list[i].name, gpus),),
                NOW - 3600,
                NOW + draw(st.sampled_from([-100.0, 0.0, 600.0, 5000.0])),
                funded,
                kind=draw(st.sampled_from(["batch", "batch", "interactive"])),
            )
        )
    pending = tuple(
        PendingJob(
            f"p{k}",
            draw(st.sampled_from(PROJECTS)),
            draw(st.sampled_from("uvw")),
            draw(st.sampled_from([1, 2, 3, 4, 8, 12, 16, 40])),
            float(draw(st.integers(0, 9))),
            draw(st.sampled_from([0.0, 600.0, 3600.0, 40000.0])),
            kind=draw(st.sampled_from(["batch", "batch", "batch", "interactive"])),
            priority=draw(st.sampled_from(["low", "normal", "high", "urgent"])),
            held=draw(st.booleans()) and draw(st.booleans()),
        )
        for k in range(draw(st.integers(0, 14)))
    )
    usage = lambda: float(draw(st.sampled_from([0, 10, 100, 1000])))  # noqa: E731
    money = lambda: float(draw(st.sampled_from([0, 5000, 1e9])))  # noqa: E731
    budgets = (
        BudgetNode("a", draw(st.sampled_from([1.0, 2.0])), 0.0),
        BudgetNode("a/x", 1.0, usage(), money()),
        BudgetNode("a/y", 2.0, usage(), money()),
        BudgetNode("b", 1.0, 0.0),
        BudgetNode("b/z", 1.0, usage(), money()),
        BudgetNode("c", draw(st.sampled_from([0.5, 1.0])), usage(), money()),
    )
    policy = Policy(
        name=draw(st.sampled_from(["fairshare", "fairshare", "priority", "fifo"])),
        interactive_pool_gpus=draw(st.sampled_from([{}, {"c": 2}])),
    )
    return Snapshot(NOW, node_list, budgets, tuple(running), pending, {"H100": 1.0}, policy=policy)


def apply(snap: Snapshot, d) -> Snapshot:
    """The snapshot the next pass would see if the decisions were carried out at once."""
    gone = {p.job_id for p in d.preemptions}
    pending = {j.id: j for j in snap.pending}
    defunded = {x.job_id for x in d.defunded}
    running = [
        replace(r, funded=False) if r.id in defunded else r
        for r in snap.running
        if r.id not in gone
    ]
    for r in snap.running:
        if r.id in gone:
            pending[r.id] = PendingJob(
                r.id, r.project, r.user, r.gpus, r.submit_s, 3600.0, kind=r.kind
            )
    liens: dict[str, float] = {}
    for s in d.starts:
        j = pending.pop(s.job_id)
        running.append(
            RunningJob(
                j.id,
                j.project,
                j.user,
                j.gpus,
                s.nodes,
                snap.now_s,
                s.protected_until_s,
                s.funded,
                j.kind,
                j.resumable,
                j.submit_s,
            )
        )
        if s.funded:
            liens[j.project] = liens.get(j.project, 0) + j.gpus * (s.protected_until_s - snap.now_s)
    budgets = tuple(
        replace(b, remaining_gpu_s=b.remaining_gpu_s - liens.get(b.path, 0.0)) for b in snap.budgets
    )
    return replace(snap, running=tuple(running), pending=tuple(pending.values()), budgets=budgets)


FAST = settings(
    max_examples=int(__import__("os").environ.get("ENGINE_EXAMPLES", 150)),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@FAST
@given(snapshots())
def test_no_gpu_is_double_booked_and_nothing_lands_on_a_drained_node(snap):
    d = schedule(snap)
    after = apply(snap, d)
    capacity = {n.name: n.gpus for n in snap.nodes}
    drained = {n.name for n in snap.nodes if n.drained}
    used: dict[str, int] = {}
    for r in after.running:
        for name, g in r.nodes:
            used[name] = used.get(name, 0) + g
    assert all(used[n] <= capacity[n] for n in used)
    assert not {n for s in d.starts for n, _ in s.nodes} & drained


@FAST
@given(snapshots())
def test_no_protected_job_is_ever_preempted(snap):
    assert_no_protected_job_preempted(snap, schedule(snap))


@FAST
@given(snapshots())
def test_every_waiting_job_has_a_reason_and_a_position(snap):
    d = schedule(snap)
    starts = {s.job_id for s in d.starts}
    waiting = {j.id for j in snap.pending} - starts
    assert set(d.pending) == waiting
    assert all(i.code in CODES and i.message and i.position >= 1 for i in d.pending.values())
    assert set(d.explanations) == {r.id for r in apply(snap, d).running}


@FAST
@given(snapshots())
def test_gang_placements_are_whole(snap):
    d = schedule(snap)
    size = {n.name: n.gpus for n in snap.nodes}
    pending = {j.id: j for j in snap.pending}
    after = apply(snap, d)
    for s in d.starts:
        job = pending[s.job_id]
        assert sum(g for _, g in s.nodes) == job.gpus
        if job.gpus <= max(size.values()):
            assert len(s.nodes) == 1
        else:
            partial = [n for n, g in s.nodes if g < size[n]]
            assert len(partial) <= 1
            # Its nodes were entirely free when it was placed: no job that was already
            # running and survived the pass shares them (later starts may use the one
            # partial node's remainder).
            survivors = {r.id for r in snap.running} & {r.id for r in after.running}
            others = {n for r in after.running if r.id in survivors for n, _ in r.nodes}
            assert not {n for n, _ in s.nodes} & others


@FAST
@given(snapshots())
def test_no_preemption_ping_pong(snap):
    d = schedule(snap)
    tree = FairTree.build(snap.budgets)
    by_id = {r.id: r for r in snap.running}
    pending = {j.id: j for j in snap.pending}
    defunded = {x.job_id for x in d.defunded}  # out of budget after protection: anyone's
    for p in d.preemptions:
        if p.by_job_id is None:
            continue
        victim, winner = by_id[p.job_id], pending[p.by_job_id]
        if victim.funded and p.job_id not in defunded and winner.kind != "interactive":
            assert tree.strictly_below(victim.project, winner.project)
            assert not tree.strictly_below(winner.project, victim.project)
    # The pass that follows, with nothing else changed, undoes no funded start. (Unfunded
    # work backfilled after a preemption may yield at once to a requeued victim: that is
    # its contract, and better than leaving the GPUs idle.)
    d2 = schedule(apply(snap, d))
    started_first = {s.job_id for s in d.starts if s.funded}
    assert not started_first & {p.job_id for p in d2.preemptions}
