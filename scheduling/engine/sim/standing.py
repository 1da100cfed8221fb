"""When does a waiting job's standing let it preempt? Wake the simulator then, not later.

Between events the running jobs' rates are constant, so usage grows linearly and standings
drift: a project that could not preempt a sibling at the last pass may be able to a few
minutes later, with no trace event in between. The live loop, passing every interval, would
notice at its next pass; an event-driven replay would not until the next event (hours, on a
quiet cluster). This module finds those moments.

A funded job may preempt another project's unprotected job only where, at the first level
where their paths differ, the victim's subtree has a level fair share below 1 and the
preemptor's at least 1 (``tree.strictly_below``). So what can change the preemptions a pass
may make is a node crossing LFS = 1, that is the sign of

    g_i(t) = s_i * U(t) - S * u_i(t)

(s_i its share, S its siblings' total share, u_i its subtree usage, U its siblings' total
usage; LFS_i >= 1 exactly when g_i >= 0). With constant rates g_i is linear in t, so:

1. After a pass that leaves fundable work waiting, record every node's sign and solve each
   g_i(t) = 0 for the first crossing ahead.
2. Check at the first pass time (a multiple of the pass interval) after that crossing, or at
   the next hour (when the hard window drops an hourly bucket and usage jumps; the decayed
   usage of ``usage: {mode: decay}`` is not linear, so hourly checks bound the error there).
3. A check compares the signs now with those recorded at the pass: any change runs a pass;
   none predicts again. A pass between replaces the watch.

Reorderings among projects that stay on the same side of 1 move no preemption, only which
waiting job comes first; they are left to the next event.
"""

from __future__ import annotations

import math

CHECK_EVERY_S = 3600.0  # the hard window's bucket


class Standings:
    def __init__(self, sim) -> None:
        self.sim = sim
        pol = sim.policy
        self.enabled = pol.name == "fairshare" and pol.preemption
        self.signs: dict[str, bool] = {}
        self.token = 0
        tree = sim.tree
        self.groups = [tree.top] + [n.children for n in tree.nodes.values() if n.children]
        self.groups = [g for g in self.groups if len(g) > 1]
        self.up = sim.up
        # fixed for the replay: each budget node's chain, and per group of siblings each
        # one's share (not below 0) and their total, summed in the order _lines always has
        self._chains = [(p, self.up[p]) for p in sim.shares]
        self._members = [
            (tuple((n.path, max(n.share, 0.0)) for n in g), sum(max(n.share, 0.0) for n in g))
            for g in self.groups
        ]

    def _lines(self, t: float) -> dict[str, tuple[float, float]]:
        """Every node's (g_i(t), dg_i/dt)."""
        sim = self.sim
        usage: dict[str, float] = {}
        rate: dict[str, float] = {}
        own, rate_of = sim._usage_now(t), sim.rate
        for p, chain in self._chains:
            u = own[p]
            r = rate_of.get(p, 0.0)
            for anc in chain:
                usage[anc] = usage.get(anc, 0.0) + u
                rate[anc] = rate.get(anc, 0.0) + r
        out = {}
        for members, total_share in self._members:
            total_usage = sum(usage.get(path, 0.0) for path, _ in members)
            total_rate = sum(rate.get(path, 0.0) for path, _ in members)
            for path, s in members:
                g = s * total_usage - total_share * usage.get(path, 0.0)
                slope = s * total_rate - total_share * rate.get(path, 0.0)
                out[path] = (g, slope)
        return out

    def watch(self, t: float) -> None:
        """Record the signs at a pass and schedule the check."""
        if not self.enabled or not self.groups:
            return
        lines = self._lines(t)
        self.signs = {p: g >= 0 for p, (g, _) in lines.items()}
        self._schedule(t, lines)

    def stop(self) -> None:
        self.token += 1

    def _schedule(self, t: float, lines) -> None:
        self.token += 1
        if not any(self.sim.rate.values()) and not self.sim.arrivals:
            return  # no funded work runs: usage is still, no standing can move
        first = math.inf
        for g, slope in lines.values():
            if g >= 0 > slope:
                first = min(first, t + g / -slope)
            elif g < 0 < slope:
                first = min(first, t + -g / slope)
        interval = self.sim.interval
        at = math.inf
        if first < math.inf:
            at = math.ceil(first / interval) * interval
            if at <= first:
                at += interval
        hour = (math.floor(t / CHECK_EVERY_S) + 1) * CHECK_EVERY_S
        self.sim._push(min(at, hour), _STANDING_KIND, self.token)

    def check(self, t: float, token: int) -> bool:
        """True: a node crossed LFS = 1 since the last pass, so a pass may preempt now."""
        if token != self.token:
            return False  # a pass since has replaced this watch
        self.sim._charge(t)
        lines = self._lines(t)
        if any((g >= 0) != self.signs.get(p) for p, (g, _) in lines.items()):
            return True
        self._schedule(t, lines)
        return False


_STANDING_KIND = 5  # simulator._STANDING
