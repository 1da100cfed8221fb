"""Where a hold goes: the nodes that free up soonest for a waiting funded job that can
neither start nor preempt (``earliest_nodes``, read by ``pass_funded._reserve``).

A running job's release time for the waiting job: now if it is unfunded; the end of its
protection if the waiting job may preempt it then (``preempt._Below.allows``); otherwise
never (its end is unknown). Kept apart from ``preempt`` (the victim search) only for size.
"""

from __future__ import annotations

from scheduling.engine.model import PendingJob
from scheduling.engine.placement import Pool
from scheduling.engine.preempt import INF, _Below, below_of
from scheduling.engine.state import PassState


def earliest_nodes(st: PassState, pool: Pool, job: PendingJob):
    """The nodes that free up soonest for ``job``: (start_s, node indexes, blockers) or None
    when the pool has no node it could ever use.

    A running job's release time for ``job``: now if it is unfunded; the end of its
    protection if ``job`` may preempt it then (it ranks strictly below, and did not displace
    ``job``'s side: ``_Below.allows``); otherwise never (infinity): it need not yield and its
    end is unknown. When no node frees up at a known time, the nodes that need the fewest
    GPUs of such jobs are returned with start_s infinity, and ``blockers`` names their
    projects: the job waits for them to finish, and the nodes are held for it meanwhile, so
    worse-ranked funded work cannot take the GPUs that free up there (no overtaking)."""
    now, running, below, gpus = st.now, st.running, below_of(st, job.project), job.gpus
    # ``below.allows(v)`` inlined (no reservation holder here): the rank test, then the
    # shield (one call per running job of every node searched was most of this function)
    shield = below.shield
    drained, held, size, free, jobs = pool.drained, pool.held, pool.size, pool.free, pool.jobs
    if not pool.is_multi(gpus):
        best = None
        for i in range(len(pool.names)):
            if drained[i] or i in held or size[i] < gpus:
                continue
            t, unknown = now, 0
            if free[i] < gpus:
                got, t = free[i], INF
                releases = []
                for j, used in jobs[i].items():
                    v = running[j]  # its release time
                    if not v.funded:
                        releases.append((now, used))
                    elif below[v.project] and v.id not in shield:
                        p = v.protected_until_s
                        releases.append((p if p > now else now, used))
                    else:
                        releases.append((INF, used))
                releases.sort()
                for rt, used in releases:
                    got += used
                    if rt == INF:
                        unknown += used
                    if got >= gpus:
                        t = rt
                        break
            key = (t, unknown, free[i], i)
            if best is None or key < best:
                best = key
        if best is None:
            return None
        return best[0], (best[3],), _blockers(st, pool, (best[3],), below) if best[0] == INF else ()
    whole = []
    for i in range(len(pool.names)):
        if drained[i] or i in held:
            continue
        t, unknown = now, 0  # the latest release time on the node
        for j, used in jobs[i].items():
            v = running[j]
            if v.funded:
                if not (below[v.project] and v.id not in shield):
                    t = INF
                    unknown += used
                elif v.protected_until_s > t:
                    t = v.protected_until_s
        whole.append((t, unknown, -size[i], i))
    whole.sort()
    chosen, left, start = [], gpus, now
    for t, _, neg_size, i in whole:
        if left <= 0:
            break
        chosen.append(i)
        left += neg_size
        start = t
    if left > 0:
        return None
    return start, tuple(chosen), _blockers(st, pool, chosen, below) if start == INF else ()


def _blockers(st: PassState, pool: Pool, idxs, below: _Below) -> tuple[str, ...]:
    """Projects of the jobs on ``idxs`` that need not yield to the job (unknown ends)."""
    out = set()
    for i in idxs:
        for j in pool.jobs[i]:
            v = st.running[j]
            if v.funded and not below.allows(v):
                out.add(v.project)
    return tuple(sorted(out))
