"""Accounting of a replay: usage charged from the running jobs' rates, budget balances with
their liens, and the snapshot handed to the engine. The root base of ``simulator.Simulator``."""

from __future__ import annotations

import heapq
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from scheduling.engine.model import BudgetNode, Node, PendingJob, Policy, RunningJob, Snapshot
from scheduling.engine.sim.scenario import Scenario, TraceJob
from scheduling.engine.tree import FairTree

if TYPE_CHECKING:
    from scheduling.engine.pass_context import PassContext
    from scheduling.engine.sim.costs import FundableWaiters
    from scheduling.engine.sim.floor import BudgetFloor, LienTargets
    from scheduling.engine.sim.result import JobState, SimResult
    from scheduling.engine.sim.standing import Standings
    from scheduling.engine.usage import DecayedUsage, HardWindowUsage


class Accounting:
    # The replay's state, set by ``Simulator.__init__`` and read by every step. Declared
    # here, at the root of the chain ``Simulator`` -> ``JobLifecycle`` -> ``ResultReport``
    # -> ``Accounting``, for a type checker (and mypyc); annotations only.
    sc: Scenario
    jobs: dict[str, JobState]
    policy: Policy
    until: float | None
    interval: float
    sample_every: float
    record: bool
    progress: Any
    cost: Any
    grants: dict[str, float]
    up: dict[str, tuple[str, ...]]
    shares: dict[str, float]
    leaves: set[str]
    tree: FairTree
    nodes: dict[str, Node]
    node_cost: dict[str, float]
    total_gpus: int
    usage: HardWindowUsage | DecayedUsage
    user_usage: HardWindowUsage | DecayedUsage
    pending: dict[str, PendingJob]
    running: dict[str, RunningJob]
    _pending_tuple: tuple | None
    _usage_of: tuple | None
    _budget_nodes: dict[str, BudgetNode]
    _running_tuple: tuple | None
    rate: dict[str, float]
    # run -> until, GPUs, cost, its chain's places in ``slot``
    liens: dict[str, tuple[float, int, float, tuple[int, ...]]]
    slot: dict[str, int]  # every budget node and implicit parent -> its place in a list
    up_slots: dict[str, tuple[int, ...]]  # ``up`` by place
    grant_slots: list[tuple[str, float, int]]  # (node, grant, place), in grants' order
    lien_ends: list[tuple[float, str]]
    user_rate: dict[tuple[str, str], float]
    unfunded_rate: dict[str, float]
    busy: int
    spent: dict[str, float]
    period: int
    charged_to: float
    heap: list
    seq: int
    drain_req: dict[str, float]
    _nodes_of: tuple | None
    drained_at: dict[str, float | None]
    res: SimResult
    last_pass: float
    displacements: tuple
    wakes: set[float]
    arrivals: int
    last_holds: frozenset
    standing: Standings
    floor: BudgetFloor
    lien_targets: LienTargets
    context: PassContext
    cluster_of: dict[str, str]
    cluster_cost: dict[str, float]
    cluster_gpus: dict[str, int]
    busy_on: dict[str, int]
    node_busy: dict[str, int]
    waiters: FundableWaiters
    frag_now: dict[str, set[str]]
    # idle while fits (costs.py): the idle GPUs a fundable waiting job fits, since when that
    # count holds, whether it must be counted again, the balances of the last pass
    fits_rate: int
    fits_since: float
    fits_stale: bool
    fund_left: dict[str, float]
    nodes_on: dict[str, list[str]]

    def _charge(self, t: float) -> None:
        t0 = self.charged_to
        if t <= t0:
            return
        period_s = self.sc.window_s
        while True:  # split at budget period boundaries
            boundary = (self.period + 1) * period_s
            stop = min(t, boundary)
            dt = stop - t0
            for project, r in self.rate.items():
                if r:
                    self.usage.charge(project, t0, stop, r)
                    self.spent[project] += r * dt
                    self.res.allocated[project] += r * dt
            for key, r in self.user_rate.items():
                if r:
                    self.user_usage.charge(key, t0, stop, r)
            for project, r in self.unfunded_rate.items():
                if r:
                    self.res.unallocated[project] += r * dt
            self.res.busy_gpu_s += self.busy * dt
            for cluster, projects in self.frag_now.items():
                idle = self._idle(cluster)
                if idle > 0 and projects and dt > 0:
                    self.res.fragmentation_total += idle * dt
                    for project in projects:
                        self.res.fragmentation[project] += idle * dt
            t0 = stop
            if stop < boundary:
                break
            self.period += 1  # a period starts at its boundary: its grants are there
            self.spent.clear()
            if stop >= t:
                break
        self.charged_to = t

    def remaining(self, t: float) -> dict[str, float]:
        """Each budget node's grant minus what its subtree spent this period and holds in
        liens (the unspent part of running funded jobs' protected windows)."""
        # Summed per node in a list, by the node's place in ``slot`` (the compiled engine
        # indexes it natively; a dict keyed by path cost two lookups per addition), in the
        # order the sums were always made, so every balance comes out the same.
        slot, up = self.slot, self.up_slots
        used = [0.0] * len(slot)
        for p, spent in self.spent.items():
            for k in up.get(p, ()):
                used[k] += spent
        # the funded runs in running order (``_rates`` keeps them), so every sum is the same;
        # a run whose protection has ended holds no lien again (the clock only moves on)
        liens, ends = self.liens, self.lien_ends
        while ends and ends[0][0] <= t:
            jid = heapq.heappop(ends)[1]
            got = liens.get(jid)
            if got is not None and got[0] <= t:  # (not a later run of the same job)
                del liens[jid]
        for lien_of in liens.values():
            until, gpus, cost, chain = lien_of
            if until > t:
                lien = (until - t) * gpus * cost
                for k in chain:
                    used[k] += lien
        return {p: grant - used[k] for p, grant, k in self.grant_slots}

    def _snapshot(self, t: float, remaining: dict[str, float]) -> Snapshot:
        usage = self._usage_now(t)
        # a node whose usage and balance did not move keeps the BudgetNode it had (most
        # nodes of a quiet subtree, pass after pass): building one costs more than comparing
        made, nodes = self._budget_nodes, []
        for p, share in self.shares.items():
            u, r = usage[p], remaining[p]
            b = made.get(p)
            if b is None or b.usage_gpu_s != u or b.remaining_gpu_s != r:
                b = made[p] = BudgetNode(p, share, u, r)
            nodes.append(b)
        budgets = tuple(nodes)
        user_usage = {k: self.user_usage.value(k, t) for k in self.user_usage.keys()}
        return Snapshot(
            t,
            self._nodes(),
            budgets,
            self._running_now(),
            self._pending_now(),
            self.sc.gpu_types,
            user_usage,
            (),
            self.policy,
            chain_balances=True,
            displacements=self.displacements,
        )

    def _usage_now(self, t: float) -> dict[str, float]:
        """Each budget node's own windowed usage at ``t``, read once per moment and charge:
        the snapshot and the standing watch after the pass ask the same (usage moves only
        when ``_charge`` moves ``charged_to``)."""
        key = (t, self.charged_to)
        if self._usage_of is None or self._usage_of[0] != key:
            self._usage_of = (key, {p: self.usage.value(p, t) for p in self.shares})
        return self._usage_of[1]

    def _running_now(self) -> tuple:
        """The running jobs as a tuple, rebuilt only after one started, stopped or changed
        (every such change goes through ``_rates``): passes between share it."""
        if self._running_tuple is None:
            self._running_tuple = tuple(self.running.values())
        return self._running_tuple

    def _pending_now(self) -> tuple:
        """The waiting jobs as a tuple, rebuilt only after one entered or left the queue."""
        if self._pending_tuple is None:
            self._pending_tuple = tuple(self.pending.values())
        return self._pending_tuple

    def _nodes(self) -> tuple:
        """The nodes with their drain flags: one tuple until a drain is requested (nodes are
        only ever added to ``drain_req``), so passes share it (and the engine's layout)."""
        key = len(self.drain_req)
        if self._nodes_of is None or self._nodes_of[0] != key:
            nodes = tuple(
                replace(n, drained=True) if n.name in self.drain_req else n
                for n in self.nodes.values()
            )
            self._nodes_of = (key, nodes)
        return self._nodes_of[1]

    def _protection(self, s: TraceJob) -> float:
        """The engine's protected window for a start (state.PassState.protection)."""
        pol = self.policy
        limit = pol.max_min_runtime_s
        if s.kind == "interactive":
            limit = min(limit, pol.interactive_max_runtime_s)
        return max(pol.min_protection_s, min(s.min_runtime_s, limit))

    def _idle(self, cluster: str) -> int:
        """Free GPUs of the cluster, leaving out nodes being drained (nothing lands there)."""
        idle = self.cluster_gpus[cluster] - self.busy_on[cluster]
        for n in self.drain_req:
            if self.cluster_of[n] == cluster:
                idle -= self.nodes[n].gpus - self.node_busy[n]
        return idle

    def _fits_at(self, t: float) -> None:
        """Count the idle-while-fits GPU-seconds up to ``t``; the caller is about to change
        what runs, waits, is drained or fundable, so the count is taken again after it.
        Called before each change, the state seen here is the one that held since the last."""
        if t > self.fits_since:
            if self.fits_stale:
                self.fits_rate = self._fitting_idle()
                self.fits_stale = False
            self.res.idle_while_fits += self.fits_rate * (t - self.fits_since)
            self.fits_since = t
        self.fits_stale = True

    def _fitting_idle(self) -> int:
        """Idle GPUs that a fundable waiting job would fit now (costs.py)."""
        total = 0
        for cluster, names in self.nodes_on.items():
            if self._idle(cluster) <= 0:
                continue
            node_gpus = self.nodes[names[0]].gpus  # a scenario's cluster is uniform
            single, multi = self.waiters.smallest_on(
                cluster, self.cluster_cost[cluster], node_gpus, self.fund_left
            )
            if not single and not multi:
                continue
            free = [
                self.nodes[n].gpus - self.node_busy[n] for n in names if n not in self.drain_req
            ]
            whole = sum(1 for f in free if f == node_gpus)
            multi_fits = multi > 0 and whole * node_gpus >= multi
            for f in free:
                if f > 0 and ((single and f >= single) or (multi_fits and f == node_gpus)):
                    total += f
        return total

    def _stop(self, job_id: str) -> RunningJob:
        r = self.running.pop(job_id)
        self._rates(r, -1)
        self.frag_now.pop(self.cluster_of[r.nodes[0][0]], None)  # until the next pass
        return r

    def _rates(self, r: RunningJob, sign: int) -> None:
        cost = self.node_cost[r.nodes[0][0]]
        self._running_tuple = None  # the running set changed
        self.busy += sign * r.gpus
        self.busy_on[self.cluster_of[r.nodes[0][0]]] += sign * r.gpus
        for name, g in r.nodes:
            self.node_busy[name] += sign * g
        if r.funded:
            self.rate[r.project] += sign * r.gpus * cost
            self.user_rate[(r.project, r.user)] += sign * r.gpus * cost
            chain = self.up.get(r.project, ())
            self.floor.runs.update(chain, r.protected_until_s, r.gpus * cost, sign)
            # A funded run joins the end of ``running`` and leaves it by ``_stop`` (a
            # defunded one comes back unfunded), so ``liens`` holds the funded runs in
            # ``running``'s order: ``remaining`` adds their liens in the order it always has.
            if sign > 0:
                self.liens[r.id] = (
                    r.protected_until_s,
                    r.gpus,
                    cost,
                    self.up_slots.get(r.project, ()),
                )
                heapq.heappush(self.lien_ends, (r.protected_until_s, r.id))
            else:
                self.liens.pop(r.id, None)  # (gone already if its protection had ended)
        else:
            self.unfunded_rate[r.project] += sign * r.gpus * cost
