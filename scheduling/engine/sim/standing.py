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

Reorderings that keep every side of 1 move no preemption, but they move which waiting job
comes first, and so which job holds the nodes that free up, and whether a job blocked behind
another's hold may now start: siblings trading places in the LFS order (``s_j * u_i -
s_i * u_j`` changes sign, linear in t as well) and users of one project trading places in
the usage order that ranks their jobs. The watch records both orders too, solves each pair
that is next to the other for the moment it would swap, and a check that finds either order
moved runs a pass.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scheduling.engine.sim.simulator import Simulator

CHECK_EVERY_S = 3600.0  # the hard window's bucket


class Standings:
    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        pol = sim.policy
        self.enabled = pol.name == "fairshare" and pol.preemption
        self.signs: dict[str, bool] = {}
        self.order: tuple = ()
        self._subtree: tuple[dict, dict] = ({}, {})
        self._pairs: list[tuple] = []
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
        """Every node's (g_i(t), dg_i/dt); its subtree usage and rate in ``self._subtree``."""
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
        self._subtree = (usage, rate)
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
        if not self.enabled:
            return
        lines = self._lines(t)
        self.signs = {p: g >= 0 for p, (g, _) in lines.items()}
        self.order = self._order(t)
        self._schedule(t, lines)

    def stop(self) -> None:
        self.token += 1

    def _schedule(self, t: float, lines) -> None:
        self.token += 1
        if not any(self.sim.rate.values()) and not self.sim.arrivals:
            return  # no funded work runs: usage is still, no standing can move
        first = self._swap_at(t)
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
        if self._order(t) != self.order:
            return True  # no side of 1 moved, but which waiting job comes first did
        self._schedule(t, lines)
        return False

    def _order(self, t: float) -> tuple:
        """The order of every sibling group (LFS, then normalised share, then path, as
        ``tree.FairTree`` sorts them) and, per project with waiting jobs, of its waiting
        users by usage (equal usage: tied, their jobs interleave by submit time). Reads the
        subtree usage of the last ``_lines``; keeps the pairs next to each other, with their
        usage and rates, for ``_swap_at``."""
        usage, rate = self._subtree
        # (s_i, u_i, r_i, s_j, u_j, r_j, a tie shows): j after i, and may overtake it
        self._pairs = pairs = []
        groups = []
        for members, total_share in self._members:
            total_usage = sum(usage.get(path, 0.0) for path, _ in members)
            keyed = []
            for path, s in members:
                norm = s / total_share if total_share > 0 else 0.0
                u = usage.get(path, 0.0) / total_usage if total_usage > 0 else 0.0
                lfs = 0.0 if norm <= 0 else math.inf if u <= 0 else norm / u
                keyed.append((-lfs, -norm, path, s))
            keyed.sort()
            groups.append(tuple(k[2] for k in keyed))
            for a, b in zip(keyed, keyed[1:], strict=False):
                if a[3] > 0 and b[3] > 0:  # (a zero share ranks last, whatever its usage)
                    ui, uj = usage.get(a[2], 0.0), usage.get(b[2], 0.0)
                    ri, rj = rate.get(a[2], 0.0), rate.get(b[2], 0.0)
                    pairs.append((a[3], ui, ri, b[3], uj, rj, False))
        users = []
        sim = self.sim
        waiting: dict[str, list] = {}
        for (project, user), group in sim.context.groups.items():
            if group.order:
                key = (project, user)
                waiting.setdefault(project, []).append(
                    (sim.user_usage.value(key, t), user, sim.user_rate.get(key, 0.0))
                )
        for project in sorted(waiting):
            ranked = sorted(waiting[project])
            users.append(
                (
                    project,
                    tuple(
                        (u, k > 0 and ranked[k - 1][0] == x) for k, (x, u, _) in enumerate(ranked)
                    ),
                )
            )
            for (ua, _, ra), (ub, _, rb) in zip(ranked, ranked[1:], strict=False):
                # b (after a) comes first once u_a - u_b turns positive, and a tie
                # (their jobs interleaved) ends as soon as their rates differ
                pairs.append((1.0, ua, ra, 1.0, ub, rb, True))
        return tuple(groups), tuple(users)

    def _swap_at(self, t: float) -> float:
        """The first moment two neighbours of ``_order`` would swap: j (after i) overtakes
        i when s_j * u_i - s_i * u_j, negative or zero now, turns positive."""
        first = math.inf
        for si, ui, ri, sj, uj, rj, tie_shows in self._pairs:
            h = sj * ui - si * uj
            slope = sj * ri - si * rj
            if slope > 0:
                first = min(first, t + max(-h, 0.0) / slope)
            elif tie_shows and h == 0 and slope != 0:
                first = t  # tied users part at once
        return first


_STANDING_KIND = 5  # simulator._STANDING
