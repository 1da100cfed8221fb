"""The fast paths of a pass on a saturated queue, and the memo they read.

The root base of ``scheduling.engine.passes.Pass``; the methods read and write its state (``st``,
``epoch``, ``searches``, ``failed_search``, ``failed_alike``, ``blocked_pools``, ...). A job
whose fate these settle takes no placement attempt and no victim search: most of a saturated
queue waits this way (``_hopeless``, ``_quiet``, ``_waits``), and the pass stops early once
nothing can start any more (``_saturated``, ``_baseline_full``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from scheduling.engine.model import (
    Defund,
    HeldReservation,
    PendingJob,
    Preempt,
    Start,
)
from scheduling.engine.placement import Pool
from scheduling.engine.preempt import open_reserved, reserved_preemptible

if TYPE_CHECKING:
    from scheduling.engine.pass_context import Group, PassContext
    from scheduling.engine.state import PassState

INF = math.inf
# The queue walk's memo (``Pass.run``): a shape (or shape and lien) -> (epoch, the pools it
# waited in, its cheapest pool's cost factor)
Waits = dict[tuple | None, tuple[int, list[Pool], float]]
MAX_VICTIM_SEARCHES_PER_POOL = 16  # bounds a pass on a saturated cluster (cf. bf_max_job_test)


class QueueMemo:
    # The pass state, set by ``Pass.__init__`` and read by every step. Declared here, at the
    # root of the chain ``Pass`` -> ``FundedSteps`` -> ``PlaceSteps`` -> ``QueueMemo``, so
    # that a type checker (and mypyc, for the optional compiled engine) knows them;
    # annotations only, no class attributes.
    details: bool
    context: PassContext | None
    st: PassState
    fairshare: bool
    starts: list[Start]
    preempts: list[Preempt]
    defunds: list[Defund]
    holds: list[HeldReservation]
    started: set[str]
    funded_fail: dict[str, str]
    holder_of: dict[str, tuple]  # job id -> (pool, start, blockers)
    blocked_pools: set[int]
    searches: dict[int, int]
    failed_search: dict[tuple[int, str], int]
    epoch: int
    waits_in: list[Pool] | None
    waits_lien: bool
    _saturated_at: tuple[int, bool]
    _full_at: tuple[int, bool]
    _min_gpus: int | None
    failed_alike: dict[tuple, int]
    _alike_epoch: int
    _funded_projects: list[str]
    _alike_of: dict[str, tuple]
    _funded_key: tuple[str, ...]
    _alike_moved: tuple[int, int] | None
    _fitting: dict[tuple, list[Pool]]

    def _baseline_full(self, queue: list[PendingJob]) -> bool:
        """A baseline places jobs on free, unheld GPUs only and never preempts: once no pool
        has one, no job that needs a GPU can start, and nothing else happens to it (its
        reason, left out without details). Checked when the pools last changed."""
        epoch, full = self._full_at
        if epoch != self.epoch:
            full = all(p.max_free() == 0 for p in self.st.pools.values())
            least = self._min_gpus
            if full and least is None:
                least = self._min_gpus = min((j.gpus for j in queue), default=1)
            full = full and least is not None and least >= 1
            self._full_at = (self.epoch, full)
        return full

    def _alike(self, pool: Pool, job: PendingJob) -> tuple:
        """What a victim search of ``job`` in ``pool`` depends on besides its size, at this
        epoch: which projects of the funded running jobs it may preempt (``_Below``) and the
        jobs shielded from it. Jobs of two projects with the same answer find the same
        victims; a failed search of one (``failed_alike``) settles the other's, for its size
        and larger, as the failed-search memo does within a project."""
        st = self.st
        if self._alike_epoch != self.epoch:
            self._alike_epoch = self.epoch
            # the running set moves only by this pass's starts and preemptions (its budget
            # floor came before the walk): recount the funded projects only then
            moved = (len(self.starts), len(self.preempts))
            funded = self._funded_projects
            if moved != self._alike_moved:
                self._alike_moved = moved
                funded = sorted({r.project for r in st.running.values() if r.funded})
            if funded != self._funded_projects:
                # the answer per project holds while the funded projects are the same:
                # the tree and the shields are fixed for the pass
                self._funded_projects = funded
                self._funded_key = tuple(funded)
                self._alike_of = {}
        preemptor = job.project
        hit = self._alike_of.get(preemptor)
        if hit is None:
            # the rank vector depends only on the tree's sides of 1 (``tree._shared_memo``)
            shared, key = st.tree.alike, (self._funded_key, preemptor)
            ranks = shared.get(key)
            if ranks is None:
                if len(shared) >= 4096:  # a memo: bounded, emptied when full
                    shared.clear()
                below = st.tree.strictly_below
                ranks = shared[key] = tuple(below(p, preemptor) for p in self._funded_projects)
            hit = self._alike_of[preemptor] = (ranks, st.shielded_from(preemptor))
        return (self.epoch, id(pool), *hit)

    def _skip(self, group: Group, k: int, waits: Waits) -> int:
        """How many jobs of ``group`` (a ``pass_context.Group``), from its position ``k``
        on, the queue walk may pass over: each would hit the walk's memo (its shape waited
        at this epoch, at the cost of the job at ``k``'s, ``run``) and its project could
        fund it, so it would wait for Priority and change nothing. The run ends before the
        first job of any other shape of the group (found at C speed in ``group.codes``).
        0: none (walk on job by job); -1: the job at ``k`` would end the walk (nothing can
        start any more, ``_saturated``)."""
        if group.wide:
            return 0
        epoch = self.epoch
        hit = waits.get(group.keys[k])  # the job at k itself: most often not settled
        if not (hit and hit[0] == epoch and hit[2]):
            return 0
        cost, codes, end = hit[2], group.codes, len(group.jobs)
        for key, code in group.ids.items():
            hit = waits.get(key)
            if hit and hit[0] == epoch and hit[2] == cost:
                continue  # its jobs are settled alike
            i = codes.find(code, k, end)  # the first job of this shape from k on
            if i >= 0:
                end = i
        left = self.st.left(group.project)
        if not left > 0:
            return 0
        # the largest lien of the run it skips; the group's largest, when that is covered
        if left < group.top() * cost and left < max(group.bases[k:end]) * cost:
            return 0
        return -1 if self._saturated() else end - k

    def _block(self, pools: list[Pool]) -> None:
        for pool in pools:
            if id(pool) not in self.blocked_pools:
                self.blocked_pools.add(id(pool))
                self.epoch += 1

    def _waits(self, job: PendingJob, tried: list[Pool]) -> bool | None:
        """The fate of ``job``, of the shape of a job that just waited in pools ``tried``
        with nothing changed since (see ``run``); None when that does not settle it.
        Fair share: it waits for Priority if one of them can fund it, else it is unfunded
        (``_try_funded``'s fast paths). A baseline: no placement in the pools it would try,
        so ``_greedy`` blocks them and records why."""
        st = self.st
        if self.fairshare:
            if any(st.can_fund(job, p) for p in tried):
                self.funded_fail[job.id] = "Priority"
                return True
            return False
        pools = [p for p in st.pools_for(job) if p.fits_ever(job.gpus)]
        fundable = [p for p in pools if st.can_fund(job, p)]
        target = fundable or pools
        ids = {id(p) for p in tried}
        if any(id(p) not in ids for p in target):
            return None
        self._block(target)
        self.funded_fail[job.id] = "Resources" if fundable else "Unfunded"
        return True

    def _saturated(self) -> bool:
        """No free GPU anywhere, not even on held nodes, and no victim search can succeed:
        every job further down the queue would wait, so the pass can stop early."""
        epoch, hit = self._saturated_at
        if epoch != self.epoch:
            hit = self._is_saturated()
            self._saturated_at = (self.epoch, hit)
        return hit

    def _is_saturated(self) -> bool:
        for pool in self.st.pools.values():
            if pool.max_free() > 0 or any(pool.free[i] > 0 for i in pool.held):
                return False
            if not self._search_futile(pool):
                return False
            if pool.held and reserved_preemptible(self.st, pool):
                return False
        return True

    def _hopeless(self, pool: Pool, job: PendingJob) -> bool:
        """A better-ranked job already waits in this pool, nothing fits and no victim search
        can succeed: the job waits for Priority without further work. Most of a saturated
        queue takes this path, which keeps a pass O(n log n) with a small constant."""
        return (
            id(pool) in self.blocked_pools
            and (
                job.gpus > pool.max_free()
                if not pool.is_multi(job.gpus)
                else len(pool.whole) * pool.max_size < job.gpus
            )
            and all(pool.free[i] < job.gpus for i in pool.held)
            and self._search_futile(pool)
            and not open_reserved(self.st, pool, job)
        )

    def _quiet(self, job: PendingJob, pools: list[Pool]) -> bool:
        """In each of ``pools`` (the job's pools that could ever hold it) a better-ranked job
        already waits, nothing fits (on a free node nor on a held one), no victim search can
        succeed (its budget is spent, or a job of this project and no larger size found none)
        and no reservation of the job's subtree has opened. Then the slow path of
        ``_try_funded`` places nothing, searches nowhere and ``_reserve`` says Priority (every
        pool is blocked): the job waits, or is unfunded if no pool can fund it. ``_hopeless``
        covers one pool and a spent search budget; this covers the per-project memo, which on
        a saturated cluster is what most of the queue meets."""
        gpus, project, blocked = job.gpus, job.project, self.blocked_pools
        for pool in pools:
            if id(pool) not in blocked:
                return False
            free, held = pool.free, pool.held
            if pool.is_multi(gpus):
                size, drained = pool.size, pool.drained
                whole = sum(size[i] for i in pool.whole)
                whole += sum(
                    size[i]
                    for i, h in held.items()
                    if not drained[i] and free[i] == size[i] and (h.reservation or h.start_s != INF)
                )
                if whole >= gpus:
                    return False
            elif gpus <= pool.max_free() or any(
                free[i] >= gpus and (h.reservation or h.start_s != INF) for i, h in held.items()
            ):  # a funded job never backfills a node held with no known start
                return False
            if not self._search_futile(pool, project, gpus):
                return False
            if held and open_reserved(self.st, pool, job):
                return False
        return True

    def _search_futile(self, pool: Pool, project: str | None = None, gpus: int = 0) -> bool:
        """No victim search in ``pool`` can succeed: its budget is spent, or (``project``
        given) a job of that project and no larger size already found none this pass."""
        if self.searches.get(id(pool), 0) >= MAX_VICTIM_SEARCHES_PER_POOL:
            return True
        if project is None:
            return False
        return self.failed_search.get((id(pool), project), gpus + 1) <= gpus
