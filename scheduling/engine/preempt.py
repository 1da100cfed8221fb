"""Victim selection and reservations for a waiting funded job.

Who may be preempted by a funded job X (``is_victim``): an unfunded job, at any moment; a
funded job past its protection whose project ranks strictly below X's at the first level
where their paths differ. Never a protected job. Because the ranking is fixed for the pass and
"strictly below" is a strict order, two jobs can never both be allowed to preempt the other.

The smallest victim set (``find_victims``): on each node, take victims unfunded first, then
funded, each group largest first, until the job fits; then drop any victim that turned out
unnecessary. Across nodes the cheapest set wins: fewest funded victims, then fewest victims,
then fewest GPUs freed, then the node name. Multi-node jobs need whole nodes whose every job
is a victim; the cheapest nodes win by the same measure.
"""

from __future__ import annotations

import math

from scheduling.engine.model import PendingJob, RunningJob
from scheduling.engine.placement import Pool
from scheduling.engine.state import PassState

INF = math.inf


def is_victim(st: PassState, victim: RunningJob, job: PendingJob, any_rank: bool = False) -> bool:
    if not victim.funded:
        return True
    if st.now < victim.protected_until_s:
        return False
    if any_rank:  # the interactive lane may displace any unprotected batch work
        return victim.kind != "interactive"
    return st.tree.strictly_below(victim.project, job.project)


class _Below(dict):
    """project -> may a funded job of that project (past its protection) yield to the
    preemptor? Filled on first use: one search asks about the same few projects per node."""

    def __init__(self, st: PassState, preemptor: str):
        super().__init__()
        self.below = st.tree.strictly_below
        self.preemptor = preemptor

    def __missing__(self, project: str) -> bool:
        hit = self[project] = self.below(project, self.preemptor)
        return hit


def _yieldable(st: PassState, pool: Pool, i: int, cache: list):
    """Jobs on node i that some waiting job could preempt now (unfunded, or past protection),
    sorted unfunded first, then largest first, with their total GPUs and the GPUs of the
    unfunded ones. ``cache`` is the pool's list (``_cache_of``): the caller reuses an entry
    while its version matches the node's."""
    now, running = st.now, st.running
    cands = []
    total = unfunded = 0
    for jid, used in pool.jobs[i].items():
        victim = running[jid]
        if not victim.funded:
            cands.append((False, -used, jid, used, victim))
            unfunded += used
        elif now >= victim.protected_until_s:
            cands.append((True, -used, jid, used, victim))
        else:
            continue
        total += used
    cands.sort()  # by (funded, -used, id): ids are unique on a node, so never by the job
    hit = cache[i] = (pool.version[i], cands, total, unfunded)
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
    else:
        cands = [c for c in yieldable if not c[0] or below[c[4].project]]
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


def find_victims(st: PassState, pool: Pool, job: PendingJob, any_rank: bool = False):
    """Cheapest (cost, placement, victim ids) in ``pool`` or None.

    Nodes are visited in name order, so a node can only win by a strictly smaller cost; one
    whose lower bound (a funded victim needed or not, one victim, the missing GPUs freed)
    already reaches the best cost is skipped without building its victim set."""
    below = None if any_rank else _Below(st, job.project)
    gpus = job.gpus
    drained, held, size, free, names = pool.drained, pool.held, pool.size, pool.free, pool.names
    cache, version = _cache_of(st, pool), pool.version
    if not pool.is_multi(gpus):
        best = None
        best_cost = None
        for i in range(len(names)):
            if drained[i] or i in held or size[i] < gpus:
                continue
            f = free[i]
            if f >= gpus:
                continue  # find() would have placed it; a held or raced node is not ours
            hit = cache[i]
            if hit is None or hit[0] != version[i]:
                hit = _yieldable(st, pool, i, cache)
            _, yieldable, total, unfunded = hit
            if f + total < gpus:
                continue
            if best_cost is not None and (0 if f + unfunded >= gpus else 1, 1, gpus - f) >= (
                best_cost
            ):
                continue
            found = _node_victims(f, yieldable, gpus, below)
            if found is None:
                continue
            if best_cost is None or found[0] < best_cost:
                best_cost = found[0]
                best = (((i, gpus),), found[1])
                if best_cost == (0, 1, 1):
                    break  # one unfunded 1-GPU victim: nothing can be cheaper (names ascend)
        return None if best is None else (best_cost, best[0], best[1])
    options = []
    for i in range(len(names)):
        if drained[i] or i in held:
            continue
        hit = cache[i]
        if hit is None or hit[0] != version[i]:
            hit = _yieldable(st, pool, i, cache)
        _, yieldable, total, _ = hit
        if free[i] + total < size[i]:
            continue
        found = _node_victims(free[i], yieldable, size[i], below)
        if found is not None:
            options.append((found[0], names[i], i, found[1]))
    options.sort()
    chosen, victims, left = [], set(), gpus
    for _cost, _, i, ids in options:
        if left <= 0:
            break
        chosen.append(i)
        victims.update(ids)
        left -= size[i]
    if left > 0:
        return None
    placement = pool.spread(gpus, chosen)
    if placement is None:
        return None
    funded = sum(1 for v in victims if st.running[v].funded)
    return (funded, len(victims), 0), placement, tuple(sorted(victims))


def earliest_nodes(st: PassState, pool: Pool, job: PendingJob):
    """The nodes that free up soonest for ``job`` (protection ends are known): returns
    (start_s, node indexes) or None when no known time frees enough of this pool.

    A running job's release time for ``job``: now if it is unfunded; the end of its
    protection if it ranks strictly below ``job``; never (infinity) otherwise, since it
    need not yield and its end is unknown."""
    now, running, below, gpus = st.now, st.running, _Below(st, job.project), job.gpus
    drained, held, size, free, jobs = pool.drained, pool.held, pool.size, pool.free, pool.jobs
    if not pool.is_multi(gpus):
        best = None
        for i in range(len(pool.names)):
            if drained[i] or i in held or size[i] < gpus:
                continue
            t = now
            if free[i] < gpus:
                got, t = free[i], INF
                releases = []
                for j, used in jobs[i].items():
                    v = running[j]  # its release time
                    if not v.funded:
                        releases.append((now, used))
                    elif below[v.project]:
                        p = v.protected_until_s
                        releases.append((p if p > now else now, used))
                    else:
                        releases.append((INF, used))
                releases.sort()
                for rt, used in releases:
                    got += used
                    if got >= gpus:
                        t = rt
                        break
                if t == INF:
                    continue
            key = (t, free[i], i)
            if best is None or key < best:
                best = key
        return None if best is None else (best[0], (best[2],))
    whole = []
    for i in range(len(pool.names)):
        if drained[i] or i in held:
            continue
        t = now  # the latest release time on the node
        for j in jobs[i]:
            v = running[j]
            if v.funded:
                if not below[v.project]:
                    t = INF
                    break
                if v.protected_until_s > t:
                    t = v.protected_until_s
        if t < INF:
            whole.append((t, -size[i], i))
    whole.sort()
    chosen, left, start = [], gpus, now
    for t, neg_size, i in whole:
        if left <= 0:
            break
        chosen.append(i)
        left += neg_size
        start = t
    if left > 0:
        return None
    return start, tuple(chosen)
