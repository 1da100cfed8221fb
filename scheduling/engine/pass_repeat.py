"""A pass that would repeat the last one: recognised without running it.

On a saturated cluster most of the simulator's passes decide nothing: every waiting job
waits, the victim searches fail, the pass stops at its search budget — and the next pass,
one interval later, runs the same searches over the same queue and fails the same way. A
pass is a pure function of its snapshot, but the snapshot's continuous inputs (the clock,
the windowed usage, the balances) move between the two; the pass reads them only through a
few comparisons. ``RepeatMemo`` keeps, after a pass that started, preempted and defunded
nothing (without details), what those comparisons answered; a later snapshot with the same
jobs, nodes and memory whose comparisons all answer the same gets the same decisions without
a pass. It is still a pass (the caller counts it and applies its decisions): it is only not
computed again.

What a pass reads from the continuous inputs, and how the memo checks it:

1. The clock: a funded run's protection end (``now >= protected_until``: victims, the budget
   floor, drains, release times), a displacement's expiry, a hold that starts now (its start
   moves with the clock), approved reservations' windows. The memo repeats only when none
   of these comparisons changes its answer between the two times (a protection end that no
   waiting job could use, ``_idle_ends``, changes nothing), there is no approved
   reservation and no node is drained (``drain_times`` reports the clock itself). A hold's
   later start is compared with ``now + protection`` too (a funded backfill must end before
   it); that turns only from allowed to refused as the clock moves, and after a pass that
   placed nothing, refusing more places nothing either (``_clock_quiet``).
2. Usage, through the Fair Tree: each node's rank (the order of siblings), whether its
   level fair share is at least 1 (``strictly_below`` is ``lv < 1 <= lp``) and whether it
   is under ``displacement_release_lfs`` (the shield); and the order of the (project, user)
   groups of the queue with their ties (``PassContext.queue``).
3. Balances: whether each node's balance is spent (the budget floor) and, per project with
   waiting jobs, whether its chain balance is positive and how many of its waiting jobs'
   liens (GPUs x protection x each pool's cost) it covers (``can_fund`` and the walk's
   ``_skip`` compare it with nothing else).

``tests/engine/test_pass_context.py`` replays the example and two saturated Philly days
with a full pass beside every pass the memo answers.
"""

from __future__ import annotations

from bisect import bisect_right
from operator import is_
from typing import TYPE_CHECKING

from scheduling.engine.model import Decisions, Snapshot
from scheduling.engine.tree import UNRANKED, FairTree, ancestors

if TYPE_CHECKING:  # (typed for mypyc: their attributes are then read natively)
    from scheduling.engine.pass_context import PassContext
    from scheduling.engine.passes import Pass

# Compiled with mypyc (``sim/compiled.py``), a plain loop over two tuples is native code,
# while ``map(is_, ...)`` calls a C function per object: identity scans take the loop there
# and the C-speed idiom when interpreted (the same answer either way; ``pass_context`` too).
COMPILED = not __file__.endswith(".py")


def identical(a: tuple, b: tuple) -> bool:
    """Two tuples of the same length hold the same objects in the same order."""
    if COMPILED:
        for k in range(len(a)):
            if a[k] is not b[k]:
                return False
        return True
    return all(map(is_, a, b))


def _same_items(a: tuple, b: tuple) -> bool:
    return a is b or len(a) == len(b) and identical(a, b)


class RepeatMemo:
    __slots__ = (
        "snap",
        "now",
        "tree",
        "signature",
        "decisions",
        "budget_hit",
        "bases",
        "built",
        "ends",
        "scaled",
    )
    # (declared for a type checker and mypyc; set by ``remember``)
    now: float
    tree: FairTree | None
    signature: tuple | None
    decisions: Decisions
    budget_hit: bool
    bases: dict[str, list[float]] | None

    def __init__(self) -> None:
        self.snap: Snapshot | None = None
        self.built: tuple[Snapshot, FairTree] | None = None
        # (running jobs, their protection ends sorted, the jobs in that order): _clock_quiet
        self.ends: tuple[tuple, list[float], list] | None = None
        self.scaled: dict[tuple[str, float], list[float]] = {}  # bases x cost: _signature

    def remember(self, pass_: Pass, decisions: Decisions, budget_hit: bool) -> None:
        """After a pass without details: keep what it read if it decided nothing. (What it
        read is worked out only when a later snapshot has the same jobs: ``repeat``.)"""
        snap = pass_.st.snap
        if (
            decisions.starts
            or decisions.preemptions
            or decisions.defunded
            or pass_.details
            or not pass_.fairshare
            or pass_.context is None
            or not _same_items(pass_.context.last, snap.pending)  # the context was not used
            or snap.reservations
            or any(n.drained for n in snap.nodes)
        ):
            self.snap = None
            return
        if self.snap is None or not _same_items(self.snap.pending, snap.pending):
            self.bases = None
            self.scaled = {}
        self.snap, self.now, self.tree, self.signature = snap, snap.now_s, pass_.st.tree, None
        self.decisions, self.budget_hit = decisions, budget_hit

    def tree_of(self, snap: Snapshot) -> FairTree | None:
        """The tree ``repeat`` built for ``snap``, if it did (the pass need not build it)."""
        built, self.built = self.built, None
        return built[1] if built is not None and built[0] is snap else None

    def repeat(self, snap: Snapshot, context: PassContext) -> tuple[Decisions, bool] | None:
        """The last pass's decisions and search-budget flag if ``snap`` provably gets the
        same; None otherwise (run the pass)."""
        last = self.snap
        if last is None or snap.policy is not last.policy and snap.policy != last.policy:
            return None
        if not (
            _same_items(snap.pending, last.pending)
            and _same_items(snap.running, last.running)
            and snap.displacements == last.displacements
            and (snap.nodes is last.nodes or snap.nodes == last.nodes)
            and not snap.reservations
            and snap.gpu_cost == last.gpu_cost
            and snap.chain_balances == last.chain_balances
        ):
            return None
        t0, t1 = self.now, snap.now_s
        ended = self._clock_quiet(snap, t0, t1) if t1 >= t0 else None
        if ended is None:
            return None
        if self.bases is None:  # per project, its waiting jobs' distinct GPUs x protection
            self.bases = context.bases()
        if self.signature is None:
            self.signature = self._signature(last, self.tree, context)
        tree = FairTree.build(snap.budgets)
        if self._signature(snap, tree, context) != self.signature or not self._idle_ends(
            ended, snap, tree, context
        ):
            self.built = (snap, tree)
            return None
        self.now = t1
        return self.decisions, self.budget_hit

    def _clock_quiet(self, snap: Snapshot, t0: float, t1: float) -> list | None:
        """None if a comparison with the clock changes between ``t0`` and ``t1``, except
        protection ends: the runs whose protection ended between them (``_idle_ends``)."""
        # (t0 >= p) != (t1 >= p) for t0 <= t1 is t0 < p <= t1: a slice of the runs sorted
        # by protection end, kept while the running jobs are the same (repeats need them so)
        if self.ends is None or self.ends[0] is not snap.running:
            order = sorted(snap.running, key=lambda r: r.protected_until_s)
            self.ends = (snap.running, [r.protected_until_s for r in order], order)
        _, ends, order = self.ends
        ended = order[bisect_right(ends, t0) : bisect_right(ends, t1)]
        until = snap.policy.displacement_memory_s
        for d in snap.displacements:
            if (t0 >= d.at_s + until) != (t1 >= d.at_s + until):
                return None
        # A hold starting now moves with the clock. One starting later keeps its start; as
        # the clock nears it, fewer funded jobs may backfill its nodes (``now + protection
        # > start`` only turns true), which changes nothing after a pass that placed none:
        # ``Pool.find`` on fewer usable nodes finds nothing either, and nothing else reads it.
        return ended if all(h.start_s > t1 for h in self.decisions.reservations) else None

    def _idle_ends(self, ended: list, snap: Snapshot, tree: FairTree, context: PassContext) -> bool:
        """Whether runs whose protection just ended change nothing yet: no waiting job may
        preempt them for standing and their budget is not spent. Such a run only joins its
        node's preemptible candidates, and every reader filters those by the preemptor's
        rank test first (``_node_victims``; a release time or a blocker in
        ``earliest_nodes`` is the same for a job that may not preempt it, protected or
        not); the budget floor would turn it unfunded; the interactive lane may displace
        any unprotected run, so with a lane no end is idle."""
        if not ended:
            return True
        if any(gpus > 0 for gpus in snap.policy.interactive_pool_gpus.values()):
            return False
        remaining = {b.path: b.remaining_gpu_s for b in snap.budgets if b.path}
        waiting = {p for (p, _), g in context.groups.items() if g.order}
        below = tree.strictly_below
        for r in ended:
            if not r.funded or r.project not in remaining:
                return False
            if any(remaining.get(a, 1.0) <= 0 for a in ancestors(r.project)):
                return False
            if any(below(r.project, p) for p in waiting):
                return False
        return True

    def _signature(self, snap: Snapshot, tree: FairTree, context: PassContext) -> tuple:
        release = snap.policy.displacement_release_lfs
        nodes = tree.nodes
        standing = tuple((n.rank, n.lfs >= 1.0, n.lfs < release) for n in nodes.values())
        usage = snap.user_usage_gpu_s
        heads = sorted(
            (nodes[p].rank if p in nodes else UNRANKED, usage.get((p, u), 0.0), p, u)
            for (p, u), g in context.groups.items()
            if g.order
        )
        order = tuple(
            (h[2], h[3], k > 0 and heads[k - 1][:2] == h[:2]) for k, h in enumerate(heads)
        )
        remaining = {b.path: b.remaining_gpu_s for b in snap.budgets if b.path}
        spent = tuple(v <= 0 for v in remaining.values())
        costs = sorted({snap.gpu_cost.get(n.gpu_type, 1.0) for n in snap.nodes})
        funds: list = []  # bools and ints
        for project, bases in self.bases.items():
            if project not in remaining:
                left = 0.0
            elif snap.chain_balances:
                left = min(remaining[a] for a in ancestors(project) if a in remaining)
            else:
                left = remaining[project]
            funds.append(left > 0)
            for c in costs:
                scaled = self.scaled.get((project, c))
                if scaled is None:  # the same floats the comparison with each b * c reads
                    scaled = self.scaled[(project, c)] = [b * c for b in bases]
                funds.append(bisect_right(scaled, left))
        return standing, order, spent, tuple(funds)
