"""Balances between passes: when one runs out, charging stops there and the live loop's next
pass makes the run unallocated; when one falls below a waiting job's lien, that job stops
being fundable (and stops holding nodes). Wake the simulator for the pass that sees it.

The live loop charges a funded run past its protection only while its project and every
ancestor have a balance (``accounting.Floor``), and its next pass (``engine.passes``,
``budget_floor``) turns the run unfunded, so that anyone may preempt it. An event-driven
replay that only passed at trace events would keep charging the run, and keep it funded and
safe from unfunded-preempting waiters, until the next event: hours, on a quiet cluster.

1. After every pass, each budget node's remaining (grant − spent − liens) falls at the rate
   of the funded runs in its subtree that are past their protection; a run still protected
   joins at its protection end (its lien pays until then). Solve for the first moment a
   node reaches zero, or the largest lien of a waiting job it funds that it still covers.
2. At that moment, charge up to it and stop charging every run of the node's subtree past
   its protection whose balance is spent: they run unallocated from then, as the live
   loop's charges stop there.
3. Pass at the live loop's next pass time (the last pass plus whole intervals) so the
   waiting work sees them as preemptible when the live loop's does.
A pass between replaces the watch.
"""

from __future__ import annotations

import math
from bisect import bisect_right, insort
from dataclasses import replace
from itertools import chain, islice
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from scheduling.engine.sim.simulator import Simulator

FLOOR_KIND = 6  # simulator._FLOOR
EPS = 1e-6  # GPU-seconds: a balance this close to zero is spent


class BudgetFloor:
    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.token = 0
        self.runs = FundedRuns()  # kept by the simulator as funded runs start and stop
        self.lead = ""  # the budget node whose crossing came first at the last watch

    def watch(self, t: float, after: bool = False, remaining: dict | None = None) -> None:
        """After a pass: schedule the first moment a balance runs out or falls below a
        waiting job's lien (``after``: strictly later than ``t``), if any. ``remaining``:
        ``sim.remaining(t)`` if the caller has it for the present state (not recomputed)."""
        self.token += 1
        when = self._first_crossing(t, remaining)
        if when < math.inf and (when > t or not after):
            self.sim._push(when, FLOOR_KIND, self.token)

    def _targets(self) -> dict[str, list[float]]:
        """Per budget node: the liens of the waiting jobs it funds, sorted (a job stops being
        fundable when a balance on its chain falls below its lien); kept up to date by the
        simulator as jobs enter and leave the queue (``LienTargets``)."""
        return self.sim.lien_targets.sorted()

    def _first_crossing(self, t: float, remaining: dict | None = None) -> float:
        sim = self.sim
        runs = self.runs
        if not runs.parts:
            return math.inf
        if remaining is None:
            remaining = sim.remaining(t)
        targets = self._targets()
        first, lead = math.inf, self.lead
        items: Iterable[tuple[str, list[tuple[float, float]]]] = runs.parts.items()
        if lead in runs.parts:  # the node that crossed first last time, first: the bound
            # below then passes over most others (the minimum is the same in any order)
            items = chain(((lead, runs.parts[lead]),), ((n, p) for n, p in items if n != lead))
        for node, parts in items:
            was = first
            left = remaining.get(node, math.inf)
            target = 0.0
            if left > 0:  # the largest lien it still covers
                values = targets.get(node, ())
                k = bisect_right(values, left)
                target = values[k - 1] if k else 0.0
            left -= target  # the first target the falling balance reaches
            if first < math.inf and left > 0:
                # It cannot fall faster than all its runs together: if even then it would
                # get there well after ``first`` (margins far above any rounding of the walk
                # below), its crossing changes nothing.
                most = runs.most(node)
                if most > 0 and left / most > (first - t) * (1 + 1e-9) + 1e-6:
                    continue
            k, rate = runs.past(node, t)
            if rate > 0 and left <= 0:
                first = min(first, t)  # spent already
                continue
            at = t
            for start, r in islice(parts, k, None):
                if at >= first:
                    break  # every crossing from here on is later than one found already
                if rate > 0 and at + left / rate <= start:
                    first = min(first, at + left / rate)
                    break
                left -= rate * (start - at)
                at, rate = start, rate + r
            else:
                if rate > 0:
                    first = min(first, at + left / rate)
            if first < was:
                self.lead = node
        return max(first, t)

    def reached(self, t: float, token: int) -> bool:
        """A balance ran out at ``t``: its subtree's runs past protection stop being charged.
        Returns False: the pass comes at the live loop's next pass time, scheduled here."""
        if token != self.token:
            return False  # a pass since has replaced this watch
        sim = self.sim
        sim._charge(t)
        remaining = sim.remaining(t)
        for jid, r in list(sim.running.items()):
            if not r.funded or t < r.protected_until_s:
                continue
            if min(remaining.get(p, math.inf) for p in sim.up.get(r.project, ())) > EPS:
                continue
            sim._rates(r, -1)
            sim.running[jid] = replace(r, funded=False, protection_source="none (unfunded)")
            sim._rates(sim.running[jid], +1)
        steps = max(1, math.ceil((t - sim.last_pass) / sim.interval - 1e-9))
        sim._wake(sim.last_pass + steps * sim.interval)
        self.watch(t, after=True)  # another balance may cross later
        return False


class FundedRuns:
    """What every budget node's balance falls by: per node, the funded runs of its subtree
    as (protection end, cost-normalised GPUs), sorted. Updated as funded runs start and
    stop (``Accounting._rates``), so the floor watch does not walk every running job.

    A run pays from its protection end (its lien pays until then): at ``t`` a node's balance
    falls at the summed rate of the runs whose protection ended by ``t``, summed in the
    order the watch has always added them (ascending), and the later ones join at their
    ends. That sum is kept per node until a run starts, stops or crosses its end."""

    def __init__(self) -> None:
        self.parts: dict[str, list[tuple[float, float]]] = {}
        self._past: dict[str, tuple[int, float]] = {}  # node -> (runs past their end, rate)
        self._most: dict[str, float] = {}  # node -> the rate of all its runs (``most``)

    def update(self, chain: tuple[str, ...], until_s: float, rate: float, sign: int) -> None:
        item = (until_s, rate)
        for node in chain:
            self._past.pop(node, None)
            self._most.pop(node, None)
            if sign > 0:
                insort(self.parts.setdefault(node, []), item)
            else:
                parts = self.parts[node]
                parts.remove(item)
                if not parts:
                    del self.parts[node]

    def past(self, node: str, t: float) -> tuple[int, float]:
        """(how many of the node's runs are past their protection at ``t``, their rate)."""
        parts = self.parts[node]
        k = bisect_right(parts, (t, math.inf))
        hit = self._past.get(node)
        if hit is None or hit[0] != k:
            rate = 0.0
            for r in sorted(r for _, r in parts[:k]):
                rate += r
            hit = self._past[node] = (k, rate)
        return hit

    def most(self, node: str) -> float:
        """The rate at which the node's balance falls once every run's protection has
        ended: the fastest it can fall (a bound only; the watch sums rates in its order)."""
        hit = self._most.get(node)
        if hit is None:
            hit = self._most[node] = sum(r for _, r in self.parts[node])
        return hit


class LienTargets:
    """The liens of the waiting funded jobs, per budget node on their chains: the values the
    floor watch compares a falling balance with. Updated as jobs enter and leave the queue,
    so a pass does not walk the whole backlog to find them (each node keeps a count per
    distinct lien and its sorted values, rebuilt only when the set of values changes)."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.count: dict[str, dict[float, int]] = {}
        self._sorted: dict[str, list[float]] = {}
        self._of: dict[str, tuple[tuple[str, ...], tuple[float, ...]]] = {}

    def add(self, spec) -> None:
        sim = self.sim
        if not spec.project:
            return
        protected = spec.gpus * sim._protection(spec)
        costs = sim.cluster_cost
        each = [costs[spec.cluster]] if spec.cluster in costs else list(costs.values())
        values = tuple(protected * c for c in each)
        chain = sim.up.get(spec.project, ())
        self._of[spec.id] = (chain, values)
        for anc in chain:
            count = self.count.setdefault(anc, {})
            for v in values:
                n = count.get(v, 0)
                count[v] = n + 1
                if not n:
                    self._sorted.pop(anc, None)

    def remove(self, job_id: str) -> None:
        chain, values = self._of.pop(job_id, ((), ()))
        for anc in chain:
            count = self.count[anc]
            for v in values:
                n = count[v] - 1
                if n:
                    count[v] = n
                else:
                    del count[v]
                    self._sorted.pop(anc, None)

    def sorted(self) -> dict[str, list[float]]:
        out = self._sorted
        for anc, count in self.count.items():
            if anc not in out:
                out[anc] = sorted(count)
        return out
