"""Victim selection for a waiting funded job (where its hold goes: ``hold_search``).

Who may be preempted by a funded job X: an unfunded job, at any moment; a funded job past
its protection whose project ranks strictly below X's at the first level where their paths
differ (``_yieldable`` keeps the unfunded and unprotected jobs of a node, ``_Below`` answers
the rank test per project, ``_node_victims`` applies both; the interactive lane may displace
any unprotected batch work). Never a protected job. Because the ranking is fixed for the pass and
"strictly below" is a strict order, two jobs can never both be allowed to preempt the other.

The smallest victim set (``find_victims``): on each node, take victims unfunded first, then
funded, each group largest first, until the job fits; then drop any victim that turned out
unnecessary. Across nodes the cheapest set wins: fewest funded victims, then fewest victims,
then fewest GPUs freed, then the node name. Multi-node jobs need whole nodes whose every job
is a victim; the cheapest nodes win by the same measure, with a victim that spans several of
them counted once (nodes sharing a victim are costed as one group).

Approved reservations (``open_reserved``): once a reservation's window has opened, a job of
its project (or subtree) may also search the reserved nodes, and there every other project's
unprotected work is a victim whatever its rank: the capacity was promised. Protected work
never is, and inside the reservation's own subtree the usual rule applies.
"""

from __future__ import annotations

import math
from itertools import compress

from scheduling.engine.model import PendingJob
from scheduling.engine.pass_repeat import COMPILED
from scheduling.engine.placement import Held, Pool
from scheduling.engine.state import PassState, in_subtree

INF = math.inf


class _Below(dict):
    """project -> may a funded job of that project (past its protection) yield to the
    preemptor? Filled on first use: one search asks about the same few projects per node."""

    def __init__(self, st: PassState, preemptor: str, holder: str = ""):
        super().__init__()
        self.below = st.tree.strictly_below
        self.preemptor = preemptor
        self.holder = holder  # on nodes reserved for ``holder``: outsiders always yield
        # Jobs that displaced the preemptor's side for standing (PassState.shielded_from):
        # they do not yield to it for standing, so no pair swaps back and forth.
        self.shield = st.shielded_from(preemptor)

    def allows(self, victim) -> bool:
        """May funded ``victim`` (past its protection) yield to the preemptor?"""
        if not self[victim.project]:
            return False
        if victim.id in self.shield:
            return bool(self.holder) and not in_subtree(victim.project, self.holder)
        return True

    def __missing__(self, project: str) -> bool:
        holder = self.holder
        if holder and not in_subtree(project, holder):
            hit = self[project] = True
        else:
            hit = self[project] = self.below(project, self.preemptor)
        return hit


def below_of(st: PassState, preemptor: str) -> _Below:
    """The rank test of ``preemptor`` (no reservation holder), one per project and pass: it
    reads only the tree and the shields, both fixed for the pass, so every search of the
    project shares its answers instead of asking the tree again."""
    hit = st.below.get(preemptor)
    if hit is None:
        hit = st.below[preemptor] = _Below(st, preemptor)
    return hit


def open_reserved(st: PassState, pool: Pool, job: PendingJob) -> dict[int, Held]:
    """Nodes of ``pool`` held by an approved reservation of ``job``'s project (or an
    ancestor) whose window has opened: node index -> hold."""
    if not pool.held or not job.project or not st.snap.reservations:
        return {}  # (only an approved reservation's hold is a ``reservation``)
    return {
        i: h
        for i, h in pool.held.items()
        if h.reservation
        and h.project
        and h.start_s <= st.now
        and not pool.drained[i]
        and in_subtree(job.project, h.project)
    }


def reserved_preemptible(st: PassState, pool: Pool) -> bool:
    """Does an opened reservation node carry unprotected work of another project? Then a
    job of the reservation's project further down the queue may still preempt it."""
    if not st.snap.reservations:
        return False  # (only an approved reservation's hold is a ``reservation``)
    now, running = st.now, st.running
    for i, h in pool.held.items():
        if not h.reservation or not h.project or h.start_s > now or pool.drained[i]:
            continue
        for jid in pool.jobs[i]:
            job = running[jid]
            if (not job.funded or now >= job.protected_until_s) and not in_subtree(
                job.project, h.project
            ):
                return True
    return False


def _yieldable(st: PassState, pool: Pool, i: int, cache: list):
    """Jobs on node i that some waiting job could preempt now (unfunded, or past protection),
    sorted unfunded first, then largest first, with their total GPUs and the GPUs of the
    unfunded ones. ``cache`` is the pool's list (``_cache_of``): the caller reuses an entry
    while its version matches the node's."""
    now, running = st.now, st.running
    cands = []
    total = unfunded = 0
    by_project: dict[str, int] = {}  # GPUs of the funded candidates, per project
    for jid, used in pool.jobs[i].items():
        victim = running[jid]
        if not victim.funded:
            cands.append((False, -used, jid, used, victim))
            unfunded += used
        elif now >= victim.protected_until_s:
            cands.append((True, -used, jid, used, victim))
            by_project[victim.project] = by_project.get(victim.project, 0) + used
        else:
            continue
        total += used
    cands.sort()  # by (funded, -used, id): ids are unique on a node, so never by the job
    # the funded candidates' projects and their GPUs, apart: find_victims sums at C speed
    projects, gpus = tuple(by_project), tuple(by_project.values())
    hit = cache[i] = (pool.version[i], cands, total, unfunded, projects, gpus)
    return hit


def _cache_of(st: PassState, pool: Pool) -> list:
    cache = st.victim_cache.get(id(pool))
    if cache is None:
        cache = st.victim_cache[id(pool)] = [None] * len(pool.names)
    return cache


def _node_victims(free: int, yieldable: list, need: int, below: _Below | None):
    """The smallest victim set on one node (``below`` None: the interactive lane, which may
    displace any unprotected batch work). ``yieldable`` must free enough in total."""
    if below is None:
        cands = [c for c in yieldable if not c[0] or c[4].kind != "interactive"]
    elif not below.shield:  # ``allows`` is then the rank test alone
        cands = [c for c in yieldable if not c[0] or below[c[4].project]]
    else:
        cands = [c for c in yieldable if not c[0] or below.allows(c[4])]
    if len(cands) < len(yieldable) and free + sum(c[3] for c in cands) < need:
        return None
    chosen, freed = [], free
    for c in cands:
        if freed >= need:
            break
        chosen.append(c)
        freed += c[3]
    for c in sorted(chosen, key=lambda c: (not c[0], c[3])):  # drop the unneeded, cheapest first
        if freed - c[3] >= need:
            chosen.remove(c)
            freed -= c[3]
    cost = (sum(1 for c in chosen if c[0]), len(chosen), freed - free)
    return cost, tuple(sorted(c[2] for c in chosen))


def find_victims(
    st: PassState,
    pool: Pool,
    job: PendingJob,
    any_rank: bool = False,
    reserved: dict[int, Held] | None = None,
    only_reserved: bool = False,
):
    """Cheapest (cost, placement, victim ids) in ``pool`` or None. ``reserved``: held nodes
    the job may search too (``open_reserved``), with their own victim rule; with
    ``only_reserved`` nothing else (the pool's other nodes are past their search budget).

    Nodes are visited in name order, so a node can only win by a strictly smaller cost; one
    whose lower bound (a funded victim needed or not, one victim, the missing GPUs freed)
    already reaches the best cost is skipped without building its victim set."""
    below = None if any_rank else below_of(st, job.project)
    reserved = reserved or {}
    rules = {i: _Below(st, job.project, h.project) for i, h in reserved.items()}
    gpus = job.gpus
    drained, held, size, free, names = pool.drained, pool.held, pool.size, pool.free, pool.names
    cache, version = _cache_of(st, pool), pool.version
    if not pool.is_multi(gpus):
        if not reserved and not only_reserved:
            return _one_node(st, pool, gpus, below)
        return _one_node(
            st, pool, gpus, below, _reserved_rows(st, pool, reserved, only_reserved), rules
        )
    options = []
    for i in range(len(names)):
        if i not in reserved and (only_reserved or drained[i] or i in held):
            continue
        hit = cache[i]
        if hit is None or hit[0] != version[i]:
            hit = _yieldable(st, pool, i, cache)
        yieldable, total = hit[1], hit[2]
        if free[i] + total < size[i]:
            continue
        found = _node_victims(free[i], yieldable, size[i], rules.get(i, below))
        if found is not None:
            options.append((found[0], names[i], i, found[1]))
    options.sort()
    seen: set[str] = set()
    shared = False  # does a multi-node victim sit on two of these nodes?
    for opt in options:
        shared = shared or not seen.isdisjoint(opt[3])
        seen.update(opt[3])
    if shared:
        chosen = _cheapest_groups(st, pool, options, gpus)
    else:
        chosen, left = [], gpus
        for _cost, _, i, _ids in options:
            if left <= 0:
                break
            chosen.append(i)
            left -= size[i]
        if left > 0:
            return None
    placement = pool.spread(gpus, chosen) if chosen else None
    if placement is None:
        return None
    ids_at = {i: ids for _, _, i, ids in options}
    used = [i for i, _ in placement] if shared else chosen  # a group may bring a node too many
    victims = {v for i in used for v in ids_at[i]}
    funded = sum(1 for v in victims if st.running[v].funded)
    return (funded, len(victims), 0), placement, tuple(sorted(victims))


def _rows(st: PassState, pool: Pool) -> list[tuple]:
    """What a victim search for a one-node job reads of each node it may use, in name order,
    kept while the pool is unchanged (``Pool.stamp``: a pass runs many failing searches in a
    row): (index, True, size, blockers, their GPUs) for a node held with no known start, and
    (index, False, size, free, candidates, their GPUs, unfunded GPUs, funded candidates'
    projects, their GPUs) for an unheld one (``_yieldable``). Drained nodes and nodes held
    from a known start or for an approved reservation are left out (no such search uses
    them)."""
    hit = st.victim_rows.get(id(pool))
    if hit is not None and hit[0] == pool.stamp:
        return hit[1]
    cache, version, held, free, size = (
        _cache_of(st, pool),
        pool.version,
        pool.held,
        pool.free,
        pool.size,
    )
    rows: list[tuple] = []
    for i in range(len(pool.names)):
        if pool.drained[i]:
            continue
        got = cache[i]
        if got is None or got[0] != version[i]:
            got = _yieldable(st, pool, i, cache)
        h = held.get(i)
        if h is None:
            rows.append((i, False, size[i], free[i], got[1], got[2], got[3], got[4], got[5]))
        elif h.start_s == INF and not h.reservation:
            # The jobs the holder waits for (which need not yield to it): see find_victims
            holder = below_of(st, h.project)
            blockers = [c for c in got[1] if c[0] and not holder.allows(c[4])]
            rows.append((i, True, size[i], blockers, sum(c[3] for c in blockers)))
    st.victim_rows[id(pool)] = (pool.stamp, rows)
    return rows


def _reserved_rows(st: PassState, pool: Pool, reserved: dict[int, Held], only: bool) -> list:
    """``_rows`` for a job with an approved reservation open to it: its reserved nodes
    (``reserved``, held or not) are searched as unheld ones, with their free GPUs; with
    ``only``, nothing else (the pool's other nodes are past their search budget)."""
    if only:
        rows = []
    else:
        rows = [row for row in _rows(st, pool) if row[0] not in reserved]
    cache, version, free, size = _cache_of(st, pool), pool.version, pool.free, pool.size
    for i in reserved:
        got = cache[i]
        if got is None or got[0] != version[i]:
            got = _yieldable(st, pool, i, cache)
        rows.append((i, False, size[i], free[i], got[1], got[2], got[3], got[4], got[5]))
    rows.sort(key=lambda row: row[0])  # in name order, as every search visits them
    return rows


def _one_node(
    st: PassState,
    pool: Pool,
    gpus: int,
    below: _Below | None,
    rows: list | None = None,
    rules: dict[int, _Below] | None = None,
):
    """``find_victims`` for a job that fits on one node: the nodes in name order, over
    ``_rows`` (or ``rows``, with the victim rule of each reserved node in ``rules``)."""
    best = best_cost = None
    # (the rows' tuples are typed where they are read: the compiled engine, ``sim/compiled``,
    # then unpacks them into machine integers instead of iterating over objects)
    for row in _rows(st, pool) if rows is None else rows:
        if row[1]:  # held with no known start: only its blockers' GPUs, if allowed
            held: tuple[int, bool, int, list, int] = row
            if held[2] < gpus or held[4] < gpus:
                continue
            found = _node_victims(0, held[3], gpus, below)
            if found is not None and (best_cost is None or found[0] < best_cost):
                best_cost = found[0]
                best = (((held[0], gpus),), found[1])
            continue
        unheld: tuple[int, bool, int, int, list, int, int, tuple[str, ...], tuple[int, ...]] = row
        i, _, size, f, yieldable, total, unfunded, projects, their_gpus = unheld
        if size < gpus or f >= gpus or f + total < gpus:
            continue  # (f >= gpus: find() would have placed it)
        if best_cost is not None and (0 if f + unfunded >= gpus else 1, 1, gpus - f) >= (best_cost):
            continue
        rule = below if rules is None else rules.get(i, below)
        if rule is not None:  # even every funded candidate the rank test allows is not enough?
            allowed = f + unfunded
            if COMPILED:  # a native loop (see pass_repeat.COMPILED)
                for k in range(len(projects)):
                    if rule[projects[k]]:
                        allowed += their_gpus[k]
            else:
                allowed += sum(compress(their_gpus, map(rule.__getitem__, projects)))
            if allowed < gpus:
                continue
        found = _node_victims(f, yieldable, gpus, rule)
        if found is None:
            continue
        if best_cost is None or found[0] < best_cost:
            best_cost = found[0]
            best = (((i, gpus),), found[1])
            if best_cost == (0, 1, 1):
                break  # one unfunded 1-GPU victim: nothing can be cheaper (names ascend)
    return None if best is None else (best_cost, best[0], best[1])


def _cheapest_groups(st: PassState, pool: Pool, options: list, gpus: int) -> list[int]:
    """Whole nodes for a multi-node job when a victim spans several candidate nodes.

    Ranking nodes one by one would count such a victim once per node, so a pair of nodes
    freed by one two-node victim would look as dear as two nodes with a victim each. Nodes
    that share a victim are grouped (preempting it frees them all), each group is costed by
    its distinct victims (funded ones, then all), and the cheapest combination of groups that
    gives enough GPUs wins: a small knapsack over the GPUs still needed (ties: names)."""
    parent = {i: i for _, _, i, _ in options}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_node: dict[str, int] = {}
    for _, _, i, ids in options:
        for v in ids:
            j = first_node.setdefault(v, i)
            parent[root(i)] = root(j)
    groups: dict[int, tuple[list[int], set[str]]] = {}
    for _, _, i, ids in options:
        nodes, victims = groups.setdefault(root(i), ([], set()))
        nodes.append(i)
        victims.update(ids)
    running, names, size = st.running, pool.names, pool.size
    best: dict[int, tuple] = {0: ((0, 0), (), ())}  # GPUs got (capped) -> cost, names, groups
    for nodes, victims in groups.values():
        funded = sum(1 for v in victims if running[v].funded)
        got_here = sum(size[i] for i in nodes)
        for got, (cost, labels, chosen) in list(best.items()):
            if got >= gpus:
                continue
            key = (
                (cost[0] + funded, cost[1] + len(victims)),
                tuple(sorted(labels + tuple(names[i] for i in nodes))),
                chosen + (tuple(nodes),),
            )
            reach = min(gpus, got + got_here)
            if reach not in best or key[:2] < best[reach][:2]:
                best[reach] = key
    if gpus not in best:
        return []
    return sorted(i for nodes in best[gpus][2] for i in nodes)
