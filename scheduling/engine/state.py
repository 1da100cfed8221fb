"""The mutable working state of one pass, built from a frozen Snapshot."""

from __future__ import annotations

import math
from functools import lru_cache

from scheduling.engine.model import Displacement, Node, PendingJob, RunningJob, Snapshot
from scheduling.engine.placement import Pool
from scheduling.engine.tree import UNRANKED, FairTree, ancestors


def in_subtree(project: str, top: str) -> bool:
    return project == top or project.startswith(top + "/")


@lru_cache(maxsize=4096)
def first_difference(a: str, b: str) -> tuple[str, str] | None:
    """The two siblings at the first level where paths ``a`` and ``b`` differ (None when
    one is an ancestor of the other, or either is empty). Cached: every pass asks it of
    every displacement still remembered, about the same few pairs of projects."""
    if not a or not b:
        return None
    for x, y in zip(ancestors(a), ancestors(b), strict=False):
        if x != y:
            return x, y
    return None


PRIORITY_LEVELS = {"low": 0, "normal": 1, "high": 2, "urgent": 3}


_LAST_LAYOUT: list = [None, None]  # the last nodes tuple asked about, and its layout
# PassState._live_memory's last answer: the displacements, running jobs and policy it was
# for, the clock's range over which it holds, the memory in force and (once built) it by side
_LAST_MEMORY: list = [None, None, None, 0.0, -1.0, None, None]


def _layout(nodes: tuple[Node, ...]) -> dict[tuple[str, str], tuple[list, list, list]]:
    """``_layout_of``, first by identity: the simulator hands the same tuple of nodes to
    every pass until one changes, and hashing it for the cache hashes each frozen Node
    (a generated ``__hash__``, interpreted even in the compiled engine)."""
    last = _LAST_LAYOUT
    if nodes is last[0]:
        return last[1]
    out = _layout_of(nodes)
    last[0], last[1] = nodes, out  # (kept alive here: its identity cannot be reused)
    return out


@lru_cache(maxsize=16)
def _layout_of(nodes: tuple[Node, ...]) -> dict[tuple[str, str], tuple[list, list, list]]:
    """Per pool (cluster, GPU type), in pool order: its node names, sizes and drain flags,
    nodes sorted by name. Cached: a caller passing many snapshots of one cluster (the
    simulator) gives the same nodes every pass."""
    out: dict[tuple[str, str], tuple[list, list, list]] = {}
    for node in sorted(nodes, key=lambda n: n.name):
        names, size, drained = out.setdefault((node.cluster, node.gpu_type), ([], [], []))
        names.append(node.name)
        size.append(node.gpus)
        drained.append(node.drained)
    return out


class PassState:
    def __init__(self, snap: Snapshot, tree: FairTree | None = None):
        self.snap = snap
        self.now = snap.now_s
        self.policy = snap.policy
        # ``tree``: the snapshot's Fair Tree when the caller built it already (pass_repeat)
        self.tree = FairTree.build(snap.budgets) if tree is None else tree
        # Balances of the nodes the snapshot gives (not of the tree's implicit parents).
        self.remaining = {b.path: b.remaining_gpu_s for b in snap.budgets if b.path}
        self._left: dict[str, float] = {}  # left() per project, until the next spend()
        self.chain_balances = snap.chain_balances
        self.pools: dict[tuple[str, str], Pool] = {}
        self.node_at: dict[str, tuple[Pool, int]] = {}
        for key, (names, size, drained) in _layout(snap.nodes).items():
            # names, sizes and drain flags are shared between passes (never written)
            pool = Pool(key[0], key[1], names, size, size.copy(), drained, [{} for _ in names])
            self.pools[key] = pool
            self.node_at.update({name: (pool, i) for i, name in enumerate(names)})
        self.running: dict[str, RunningJob] = {}
        self.interactive_by_user: dict[str, int] = {}
        self.interactive_gpus: dict[str, int] = {}
        node_at, by_user, by_cluster = self.node_at, self.interactive_by_user, self.interactive_gpus
        for job in snap.running:  # its GPUs taken from its nodes
            self.running[job.id] = job
            for name, gpus in job.nodes:
                at = node_at.get(name)
                if at is not None:
                    pool, i = at
                    pool.free[i] -= gpus
                    on = pool.jobs[i]
                    on[job.id] = on.get(job.id, 0) + gpus
            if job.kind == "interactive":
                by_user[job.user] = by_user.get(job.user, 0) + 1
                cluster = self.cluster_of(job)
                by_cluster[cluster] = by_cluster.get(cluster, 0) + job.gpus
        for pool in self.pools.values():
            pool.index()
        self._prot: dict[tuple, float] = {}
        self.victim_cache: dict = {}
        self.victim_rows: dict = {}  # preempt._rows: per pool, while it is unchanged
        self.below: dict = {}  # preempt.below_of: each project's rank test, for the pass
        self._rank_of = {path: n.rank for path, n in self.tree.nodes.items()}
        self._user_usage = snap.user_usage_gpu_s
        self._pool_cache: dict[tuple[str | None, str | None], list[Pool]] = {}
        self._memory_by_side: dict[str, dict[str, list[str]]] | None = None
        self.memory = self._live_memory(snap)  # (may set the above)
        self._shielded: dict[str, frozenset[str]] = {}
        self.new_memory: list[Displacement] = []

    def _live_memory(self, snap: Snapshot) -> list[tuple[Displacement, str, str]]:
        """Displacements still in force: (entry, victim side, displacer side), the two
        siblings at the first level where the victim's and the displacer's paths differ.
        The last answer is given again (``_LAST_MEMORY``) for the same memory, running jobs
        and policy (the simulator hands every pass the same tuples until one changes) while
        the clock crosses no entry's end: the answer reads nothing else."""
        now, last = self.now, _LAST_MEMORY
        if (
            snap.displacements is last[0]
            and snap.running is last[1]
            and snap.policy is last[2]
            and last[3] <= now < last[4]
        ):
            self._memory_by_side = last[6]
            return last[5]
        out = []
        until = self.policy.displacement_memory_s
        lo, hi = -math.inf, math.inf  # the latest end passed, the earliest end to come
        for d in snap.displacements:
            end = d.at_s + until
            if now >= end:
                lo = max(lo, end)
                continue
            hi = min(hi, end)
            by = self.running.get(d.by_id)
            if by is None or not by.funded:
                continue
            sides = first_difference(d.victim_project, d.by_project)
            if sides is not None:
                out.append((d, sides[0], sides[1]))
        last[:] = [snap.displacements, snap.running, snap.policy, lo, hi, out, None]
        return out

    def shielded_from(self, preemptor: str) -> frozenset[str]:
        """Running jobs a job of ``preemptor`` may not preempt for standing: they displaced
        a job of its side of the tree, the memory has not expired, and their own side has
        not since gone far over its share. (Fixed for the pass: the memory read here is the
        snapshot's, and the tree does not change; so it is computed once per project.)"""
        if not self.memory or not preemptor:
            return frozenset()
        hit = self._shielded.get(preemptor)
        if hit is not None:
            return hit
        by_victim_side = self._memory_by_side
        if by_victim_side is None:  # in_subtree(preemptor, side) <=> side is an ancestor
            # victim side -> displacer side -> the displacers: the release test is per side
            by_victim_side = self._memory_by_side = {}
            for d, victim_side, by_side in self.memory:
                sides = by_victim_side.setdefault(victim_side, {})
                sides.setdefault(by_side, []).append(d.by_id)
            if _LAST_MEMORY[5] is self.memory:  # (kept with it: built from it alone)
                _LAST_MEMORY[6] = by_victim_side
        release = self.policy.displacement_release_lfs
        nodes = self.tree.nodes
        shield: set[str] = set()
        for side in ancestors(preemptor):
            for by_side, ids in by_victim_side.get(side, {}).items():
                if not (by_side in nodes and nodes[by_side].lfs < release):
                    shield.update(ids)
        hit = self._shielded[preemptor] = frozenset(shield)
        return hit

    def cluster_of(self, job: RunningJob) -> str:
        at = self.node_at.get(job.nodes[0][0]) if job.nodes else None
        return at[0].cluster if at else ""

    def pool_of(self, job: RunningJob) -> Pool | None:
        at = self.node_at.get(job.nodes[0][0]) if job.nodes else None
        return at[0] if at else None

    def remove_running(self, job_id: str) -> RunningJob:
        job = self.running.pop(job_id)
        for name, _ in job.nodes:
            at = self.node_at.get(name)
            if at is not None:
                at[0].release(at[1], job_id)
        if job.kind == "interactive":
            self.interactive_by_user[job.user] -= 1
            self.interactive_gpus[self.cluster_of(job)] -= job.gpus
        return job

    def pools_for(self, job: PendingJob) -> list[Pool]:
        key = (job.cluster, job.gpu_type)
        hit = self._pool_cache.get(key)
        if hit is None:
            hit = [
                p
                for k, p in sorted(self.pools.items())
                if (job.cluster is None or k[0] == job.cluster)
                and (job.gpu_type is None or k[1] == job.gpu_type)
            ]
            self._pool_cache[key] = hit
        return hit

    def cost(self, gpu_type: str) -> float:
        return self.snap.gpu_cost.get(gpu_type, 1.0)

    def protection(self, job: PendingJob) -> float:
        key = (job.min_runtime_s, job.kind, job.max_protection_s)  # few distinct values
        hit = self._prot.get(key)
        if hit is None:
            hit = self._prot[key] = self._protection(job)
        return hit

    def _protection(self, job: PendingJob) -> float:
        """The declared min runtime up to the cap; an approved exception protects for its
        approved hours at every start (pending at approval, requeued, resumed)."""
        wanted = min(job.min_runtime_s, self.policy.max_min_runtime_s)
        if job.max_protection_s is not None:
            wanted = max(wanted, job.max_protection_s)
        if job.kind == "interactive":
            wanted = min(wanted, self.policy.interactive_max_runtime_s)
        return max(self.policy.min_protection_s, wanted)

    def lien(self, job: PendingJob, pool: Pool) -> float:
        return job.gpus * self.protection(job) * self.cost(pool.gpu_type)

    def left(self, project: str) -> float:
        """What ``project`` can still spend: the least balance along its chain (the project
        and every ancestor with a budget), since spending counts against all of them."""
        hit = self._left.get(project)
        if hit is None:
            hit = self._left[project] = self._chain_left(project)
        return hit

    def _chain_left(self, project: str) -> float:
        if not project or project not in self.remaining:
            return 0.0
        remaining = self.remaining
        if not self.chain_balances:
            return remaining[project]
        return min(remaining[p] for p in ancestors(project) if p in remaining)

    def out_of(self, project: str) -> str:
        """The first node on the chain, from the top, whose balance has run out ("" if none)."""
        if project not in self.remaining:
            return project
        for path in ancestors(project) if self.chain_balances else (project,):
            if self.remaining.get(path, 1.0) <= 0:
                return path
        return ""

    def spend(self, project: str, amount: float) -> None:
        self._left.clear()
        for path in ancestors(project):
            if path in self.remaining:
                self.remaining[path] -= amount

    def can_fund(self, job: PendingJob, pool: Pool) -> bool:
        if not job.project or job.project not in self.tree.nodes:
            return False
        left = self.left(job.project)
        return left > 0 and left >= job.gpus * self.protection(job) * self.cost(pool.gpu_type)

    def queue(self, jobs) -> list[PendingJob]:
        """``jobs`` in ``order_key`` order. For fair share: each key column is read once, in
        the jobs' own order (a pass touches 10^4 jobs, and reading them in a shuffled order
        is mostly cache misses), then positions are sorted stably by one column at a time,
        least significant first (id, submit time, user usage, project rank). That is the
        same order as one sort on the key tuples (ties keep their input order in both), but
        Python compares plain floats, strings and ints much faster than tuples whose first
        elements tie, as ranks do for every job of a project."""
        if self.policy.name != "fairshare":
            return sorted(jobs, key=self.order_key)
        rank_of, usage = self._rank_of, self._user_usage
        jobs = list(jobs)
        column = [j.id for j in jobs]
        order = sorted(range(len(jobs)), key=column.__getitem__)
        column = [j.submit_s for j in jobs]
        order.sort(key=column.__getitem__)
        column = [usage.get((j.project, j.user), 0.0) for j in jobs]
        order.sort(key=column.__getitem__)
        column = [rank_of.get(j.project, UNRANKED) for j in jobs]
        order.sort(key=column.__getitem__)
        return [jobs[n] for n in order]

    def order_key(self, job: PendingJob):
        name = self.policy.name
        if name == "fifo":
            return (job.submit_s, job.id)
        if name == "priority":
            return (-PRIORITY_LEVELS.get(job.priority, 1), job.submit_s, job.id)
        usage = self._user_usage.get((job.project, job.user), 0.0)
        return (self._rank_of.get(job.project, UNRANKED), usage, job.submit_s, job.id)
