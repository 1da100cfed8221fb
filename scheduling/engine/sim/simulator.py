"""Event-driven replay of a trace through the engine.

The clock jumps from event to event (submit, finish, protection end, drain request, a sample
tick); a scheduling pass runs at an event time, at most once per ``pass_interval_s`` (later
events within the interval are served by a pass at its end), as a live scheduler's loop
would. The clock never jumps past a moment at which the live loop's next pass would change
something: after a pass that started or preempted a job, held nodes it had not held before,
or stopped at its victim-search budget, the next pass runs one interval later (the live loop
would run it then; its victims, the jobs left behind by the budget and the unfunded work that
a preempting pass defers are served by it). A pass that changed nothing is followed only by
the next event: with the same state, the engine decides the same. Usage is charged per project
at each pass from the running jobs' rates, so a pass costs O(projects + running + pending),
never O(elapsed seconds).

Budget periods are the scenario's window: each period every project's grant is available
again; a funded start holds a lien on the unspent part of its protected window. A budget
node's remaining is its grant minus what its whole subtree spent and holds in liens, so a
program's remaining is never larger than what its projects left it. Preemption costs what the
scenario says (``costs.py``).

``Simulator`` keeps the event loop and applies each pass's decisions; a job's entry into the
queue, start and preemption live in ``lifecycle.py``, charging usage, the balances and the
snapshot in ``accounting.py``, the result and its reporting steps in ``result.py``. It hands
every pass the same ``PassContext`` (the queue kept in order between passes): the decisions
are those of a pass without one (``tests/engine/test_pass_context.py``), only cheaper.
"""

from __future__ import annotations

import gc
import heapq
from collections import defaultdict
from dataclasses import replace

from scheduling.engine.model import (
    BudgetNode,
    Decisions,
    Node,
    Policy,
    Snapshot,
)
from scheduling.engine.pass_context import PassContext
from scheduling.engine.passes import MAX_VICTIM_SEARCHES_PER_POOL, Pass
from scheduling.engine.sim.costs import FundableWaiters
from scheduling.engine.sim.floor import FLOOR_KIND as _FLOOR
from scheduling.engine.sim.floor import BudgetFloor, LienTargets
from scheduling.engine.sim.lifecycle import (
    _DRAIN,
    _FINISH,
    _FINISH_AFTER_START,
    _SAMPLE,
    _STANDING,
    _SUBMIT,
    _WAKE,
    FINISH,
    SUBMIT,
    JobLifecycle,
    _names,
)
from scheduling.engine.sim.result import JobState, SimResult
from scheduling.engine.sim.scenario import Scenario, TraceJob
from scheduling.engine.sim.standing import Standings
from scheduling.engine.tree import FairTree
from scheduling.engine.usage import DecayedUsage, HardWindowUsage


class Simulator(JobLifecycle):
    def __init__(
        self,
        scenario: Scenario,
        jobs: list[TraceJob],
        policy: str = "fairshare",
        until_s: float | None = None,
        pass_interval_s: float = 60.0,
        sample_every_s: float = 6 * 3600.0,
        record_events: bool = True,
        progress=None,
    ):
        self.sc = scenario
        self.jobs = {j.id: JobState(j, j.duration_s) for j in jobs}
        self.policy = Policy(
            name=policy,
            interactive_pool_gpus=dict(scenario.interactive_pool_gpus),
            interactive_per_user=scenario.interactive_per_user,
            interactive_max_runtime_s=scenario.interactive_max_runtime_s,
        )
        self.until = until_s
        self.interval = pass_interval_s
        self.sample_every = sample_every_s
        self.record = record_events
        self.progress = progress
        self.cost = scenario.preemption
        self.grants = {b.path: b.gpu_hours * 3600.0 for b in scenario.budgets}
        # every budget node with itself and its ancestors: spending rolls up the tree
        self.up = {p: _ancestors(p) for p in self.grants}
        self.slot = {
            a: k for k, a in enumerate(dict.fromkeys(a for c in self.up.values() for a in c))
        }
        self.up_slots = {p: tuple(self.slot[a] for a in chain) for p, chain in self.up.items()}
        self.grant_slots = [(p, g, self.slot[p]) for p, g in self.grants.items()]
        self.shares = {b.path: b.share for b in scenario.budgets}
        self.leaves = {b.path for b in scenario.budgets} - {
            b.path.rsplit("/", 1)[0] for b in scenario.budgets if "/" in b.path
        }
        self.tree = FairTree.build([BudgetNode(p, s) for p, s in self.shares.items()])
        self.nodes = {
            name: Node(name, c.name, c.gpu_type, c.gpus_per_node)
            for name, c in scenario.node_names()
        }
        self.node_cost = {n: scenario.gpu_types.get(x.gpu_type, 1.0) for n, x in self.nodes.items()}
        self.total_gpus = sum(n.gpus for n in self.nodes.values())
        if scenario.usage_mode == "decay":
            self.usage = DecayedUsage(scenario.half_life_days * 86400.0)
            self.user_usage = DecayedUsage(scenario.half_life_days * 86400.0)
        else:
            self.usage = HardWindowUsage(scenario.window_s)
            self.user_usage = HardWindowUsage(scenario.window_s)
        self.pending = {}
        self.running = {}
        self._pending_tuple = None  # Accounting._pending_now
        self._usage_of = None  # Accounting._usage_now
        self._budget_nodes = {}  # Accounting._snapshot
        self._running_tuple = None  # Accounting._running_now
        self.rate = defaultdict(float)  # project -> funded cost-normalised GPUs
        # funded run -> (protection end, GPUs, cost, budget chain), in running order (_rates)
        self.liens = {}
        self.lien_ends = []  # heap of (protection end, run) in liens
        self.user_rate = defaultdict(float)
        self.unfunded_rate = defaultdict(float)
        self.busy = 0
        self.spent = defaultdict(float)  # this period
        self.period = 0
        self.charged_to = 0.0
        self.heap = []
        self.seq = 0
        self.drain_req = {}
        self._nodes_of = None  # (drains requested, nodes): Accounting._nodes
        self.drained_at = {}
        self.res = SimResult(
            policy,
            0.0,
            scenario,
            self.tree,
            self.total_gpus,
            0.0,
            defaultdict(float),
            defaultdict(float),
            defaultdict(list),
            defaultdict(list),
            0,
            0,
            0,
            0,
            [],
        )
        self.res.wasted = defaultdict(float)
        self.res.fragmentation = defaultdict(float)
        self.last_pass = -float("inf")
        # who displaced whom, carried from pass to pass as the live loop keeps it on timelines
        self.displacements = ()
        self.wakes = set()  # pass-interval wake-ups already queued
        self.arrivals = 0  # submits and drain requests still to come
        self.last_holds = frozenset()
        self.standing = Standings(self)
        self.floor = BudgetFloor(self)
        self.lien_targets = LienTargets(self)
        self.context = PassContext()  # the queue kept in order from pass to pass
        self.cluster_of = {name: n.cluster for name, n in self.nodes.items()}
        self.cluster_cost = {
            c.name: scenario.gpu_types.get(c.gpu_type, 1.0) for c in scenario.clusters
        }
        self.cluster_gpus = {c.name: c.nodes * c.gpus_per_node for c in scenario.clusters}
        self.busy_on = defaultdict(int)  # cluster -> GPUs in use
        self.node_busy = defaultdict(int)
        self.waiters = FundableWaiters()
        self.frag_now = {}  # cluster -> projects whose work waits there
        self.fits_rate = 0  # Accounting._fits_at
        self.fits_since = 0.0
        self.fits_stale = False
        self.fund_left = {}
        self.nodes_on = {c.name: [] for c in scenario.clusters}
        for name, c in scenario.node_names():
            self.nodes_on[c.name].append(name)

    # ---- the loop ----------------------------------------------------------------------

    def run(self) -> SimResult:
        for j in self.jobs.values():
            self._push(j.spec.submit_s, _SUBMIT, j.spec.id)
            self.arrivals += 1
        for node, at in self.sc.maintenance:
            if self.until is None or at <= self.until:
                self._push(at, _DRAIN, node)
                self.arrivals += 1
        if self.sample_every:
            self._push(0.0, _SAMPLE)
        self._push(self.sc.window_s, _WAKE, "period")
        t = 0.0
        while self.heap:
            t = self.heap[0][0]
            if self.until is not None and t > self.until:
                t = self.until
                break
            need_pass = False
            while self.heap and self.heap[0][0] == t:
                _, kind, _, payload = heapq.heappop(self.heap)
                need_pass |= self._handle(t, kind, payload)
            if not need_pass:
                continue
            if t >= self.last_pass + self.interval:
                if self._pass(t):  # it changed something: the live loop passes again soon
                    self._wake(t + self.interval)
            else:
                self._wake(self.last_pass + self.interval)
            if self.progress:
                self.progress(t)
            if self.until is None and self._idle_for_good():
                break
        self._charge(t)
        self._fits_at(t)
        self.res.horizon_s = self.until if self.until is not None else t
        self._finish_report(self.res.horizon_s)
        return self.res

    def _wake(self, at: float) -> None:
        if at not in self.wakes:
            self.wakes.add(at)
            self._push(at, _WAKE)

    def _idle_for_good(self) -> bool:
        """Nothing runs, nothing more arrives, and no waiting job can ever fit: the replay is
        over (a job too large for every cluster must not stretch the horizon)."""
        if self.running or self.arrivals:
            return False
        return not any(self._fits_ever(self.jobs[j].spec) for j in self.pending)

    def _fits_ever(self, s: TraceJob) -> bool:
        for c in self.sc.clusters:
            if s.cluster is not None and s.cluster != c.name:
                continue
            on = [n for name, n in self.nodes.items() if n.cluster == c.name]
            up = [n.gpus for n in on if n.name not in self.drain_req]
            if s.gpus <= max(up, default=0) or (s.gpus > c.gpus_per_node and s.gpus <= sum(up)):
                return True
        return False

    def _handle(self, t: float, kind: int, payload) -> bool:
        if kind in (_SUBMIT, _DRAIN):
            self.arrivals -= 1
        if kind == _SUBMIT:
            self._fits_at(t)
            state = self.jobs[payload]
            self.res.submitted += 1
            self._enqueue(state)
            self._event(t, payload, SUBMIT)
            return True
        if kind == _FINISH:
            job_id, attempt = payload
            state = self.jobs[job_id]
            if state.attempt != attempt or job_id not in self.running:
                return False  # a stale finish: the job was preempted since
            self._charge(t)
            self._fits_at(t)
            r = self._stop(job_id)
            self.res.wasted[r.project] += state.overhead_s * r.gpus * self.node_cost[r.nodes[0][0]]
            state.left_s = 0.0
            state.end_s = t
            self.res.completed += 1
            order = _FINISH_AFTER_START if r.start_s == t else None
            self._event(t, job_id, FINISH, _names(r.nodes), order=order)
            return True
        if kind == _DRAIN:
            self._fits_at(t)
            self.drain_req[payload] = t
            self.drained_at[payload] = None
            return True
        if kind == _SAMPLE:
            self._sample(t)
            if self.heap and any(k != _SAMPLE for _, k, _, _ in self.heap):
                self._push(t + self.sample_every, _SAMPLE)
            return False
        if kind == _STANDING:
            return self.standing.check(t, payload)
        if kind == _FLOOR:
            return self.floor.reached(t, payload)
        if kind == _WAKE and payload == "period":
            # grants renew: work that ran out of budget may be funded now (the live loop
            # passes within an interval of the renewal); the next renewal, while work remains
            if self.running or self.arrivals or any(self.spent.values()):
                self._push(t + self.sc.window_s, _WAKE, "period")
            return bool(self.pending)
        if kind == _WAKE:
            self.wakes.discard(t)
        return True  # a wake-up or a protection end: time for a pass

    def _pass(self, t: float) -> bool:
        """One engine pass at ``t``, applied. True when the live loop's next pass, one
        interval later, could decide something new: this one started, preempted or held
        something new, or stopped searching for victims at its budget."""
        self._charge(t)
        self._fits_at(t)
        self.last_pass = t
        self.res.passes += 1
        remaining = self.remaining(t)
        decisions, budget_hit = self._engine(self._snapshot(t, remaining))
        for d in decisions.defunded:  # the budget floor: unallocated from now, no longer charged
            r = self._stop(d.job_id)
            r = replace(r, funded=False)
            self.running[d.job_id] = r
            self._rates(r, +1)
        for p in decisions.preemptions:
            self._preempted(t, p.job_id)
        for s in decisions.starts:
            self._started(t, s)
        for node in self.drain_req:
            if self.drained_at[node] is None and not any(
                node == n for r in self.running.values() for n, _ in r.nodes
            ):
                self.drained_at[node] = t
        if decisions.preemptions:  # victims' liens are gone: count again
            remaining = self.remaining(t)
        for st in () if decisions.preemptions else decisions.starts:  # new liens, up the tree
            r = self.running[st.job_id]
            if r.funded and r.protected_until_s > t:
                lien = (r.protected_until_s - t) * r.gpus * self.node_cost[r.nodes[0][0]]
                for anc in self.up.get(r.project, ()):
                    remaining[anc] -= lien
        self.frag_now = self.waiters.projects_on(self.cluster_cost, remaining)
        self.fund_left = remaining
        holds = frozenset((h.job_id, h.nodes, h.start_s) for h in decisions.reservations)
        new_hold = not holds <= self.last_holds
        self.last_holds = holds
        if decisions.displacements is not self.displacements:
            self.displacements = decisions.displacements
            self._memory_ends(t)
        again = bool(decisions.starts or decisions.preemptions or new_hold or budget_hit)
        if any(self.frag_now.values()) and not again:
            # fundable work waits and no pass is due in one interval: when may standing (or
            # the order of the queue) let it in? (With one due, that pass sees it as soon as
            # the live loop's would, and watches again.)
            self.standing.watch(t)
        else:
            self.standing.stop()
        # when a balance runs out, charges stop and a pass follows; after a pass that changed
        # nothing, the balances counted before it are those of now (spent and running as then)
        quiet = not (decisions.starts or decisions.preemptions or decisions.defunded)
        self.floor.watch(t, remaining=remaining if quiet else None)
        return again

    def _memory_ends(self, t: float) -> None:
        """Wake when the earliest displacement the memory holds ends: its victim's side may
        preempt the displacer back from then on, and nothing else need happen at that moment
        for the live loop's next pass to do it. (Each pass that hands back a new memory
        schedules its earliest end; the pass at the wake hands back one without it.)"""
        until = self.policy.displacement_memory_s
        end = min((d.at_s + until for d in self.displacements if d.at_s + until > t), default=None)
        if end is not None:
            self._wake(end)

    def _engine(self, snapshot: Snapshot) -> tuple[Decisions, bool]:
        """The engine's pass over ``snapshot`` (``replay_check`` runs a second one beside)."""
        return _run_pass(snapshot, self.context)


def _ancestors(path: str) -> tuple[str, ...]:
    parts = path.split("/")
    return tuple("/".join(parts[: i + 1]) for i in range(len(parts)))


def _run_pass(snapshot: Snapshot, context: PassContext) -> tuple[Decisions, bool]:
    """``passes.run_pass`` without details, also telling whether the pass stopped searching
    for victims in some pool because it reached ``MAX_VICTIM_SEARCHES_PER_POOL``. With a
    context, a pass that provably repeats the last one, which decided nothing, is answered
    from it (``pass_repeat.RepeatMemo``) without running again."""
    if context is not None:
        same = context.repeats.repeat(snapshot, context)
        if same is not None:
            return same
    enabled = gc.isenabled()
    gc.disable()  # as run_pass does: a pass makes no reference cycles
    try:
        p = Pass(snapshot, details=False, context=context)
        decisions = p.run()
    finally:
        if enabled:
            gc.enable()
    budget_hit = any(n >= MAX_VICTIM_SEARCHES_PER_POOL for n in p.searches.values())
    if context is not None:
        context.repeats.remember(p, decisions, budget_hit)
    return decisions, budget_hit


def simulate(
    scenario: Scenario, jobs: list[TraceJob], policy: str = "fairshare", **kw
) -> SimResult:
    return Simulator(scenario, jobs, policy, **kw).run()
