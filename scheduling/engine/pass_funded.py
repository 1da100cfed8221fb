"""Funded jobs of a pass: place, else preempt, else hold the nodes that free up soonest.

The base of ``scheduling.engine.passes.Pass`` (step 6 of its docstring); the fast paths it
tries first live in ``pass_memo``, placing and starting in ``pass_place``.
"""

from __future__ import annotations

from scheduling.engine.hold_search import earliest_nodes
from scheduling.engine.model import HeldReservation, PendingJob
from scheduling.engine.pass_memo import MAX_VICTIM_SEARCHES_PER_POOL
from scheduling.engine.pass_place import PlaceSteps
from scheduling.engine.placement import Held, Pool
from scheduling.engine.preempt import find_victims, open_reserved


class FundedSteps(PlaceSteps):
    def _try_funded(self, job: PendingJob) -> bool:
        """Place a funded job or record why it waits. False: it is unfunded (try later).
        ``waits_in`` (and ``waits_lien``): the pools it waits for in a way its shape shares
        (``run`` remembers it), else None. Reset here, not by the caller: a type checker
        (and mypyc) would otherwise take the caller's None for the value read after."""
        self.waits_in, self.waits_lien = None, False
        st = self.st
        if job.kind == "interactive" and st.policy.interactive_pool_gpus:
            pools = [p for p in st.pools_for(job) if self._lane_room(job, p)]
            if not pools:
                self.funded_fail[job.id] = "InteractiveLimit"
                return True
            pools = [p for p in pools if p.fits_ever(job.gpus)]
        else:  # which pools could ever hold it is fixed for the pass: once per shape
            key = (job.cluster, job.gpu_type, job.gpus)
            fitting = self._fitting.get(key)
            if fitting is None:
                fitting = [p for p in st.pools_for(job) if p.fits_ever(job.gpus)]
                self._fitting[key] = fitting
            pools = fitting
        if not pools:  # it can never fit: it must not block the jobs behind it
            self.funded_fail[job.id] = "ExceedsCapacity"
            return True
        # (for a job that fits on one node, ``_hopeless`` implies ``_quiet``, which then
        # decides the same: only a multi-node job needs it first)
        if (
            len(pools) == 1
            and self.fairshare
            and pools[0].is_multi(job.gpus)
            and self._hopeless(pools[0], job)
        ):
            self.waits_in = pools
            if not st.can_fund(job, pools[0]):
                return False
            self.funded_fail[job.id] = "Priority"  # fast path: a better job already waits here
            return True
        if self.fairshare and self._quiet(job, pools):
            # the slow path would find no placement, search nowhere and wait for Priority
            self.waits_in = pools
            if not any(st.can_fund(job, p) for p in pools):
                return False
            self.funded_fail[job.id] = "Priority"
            return True
        fundable = [p for p in pools if st.can_fund(job, p)]
        if not fundable:
            return False if self.fairshare else self._greedy(job, pools, funded=False)
        if not self.fairshare:
            return self._greedy(job, fundable, funded=True)
        for pool in fundable:
            placement = pool.find(job.gpus, self._backfill_rule(job, pool, True))
            if placement is not None:
                self._start(job, pool, placement, True, (), "")
                return True
        best, searched = None, False
        for pool in fundable if st.policy.preemption else ():
            reserved = open_reserved(st, pool, job)  # its own reservation: always searched
            futile = self._search_futile(pool, job.project, job.gpus)
            if not pool.fits_ever(job.gpus) or (futile and not reserved):
                continue
            searched = True
            alike = None if reserved else self._alike(pool, job)
            if alike is not None and self.failed_alike.get(alike, job.gpus + 1) <= job.gpus:
                found = None  # a job that may preempt exactly the same jobs found none
            else:
                found = find_victims(st, pool, job, reserved=reserved, only_reserved=futile)
                if found is None and alike is not None:
                    self.failed_alike[alike] = min(self.failed_alike.get(alike, job.gpus), job.gpus)
            n = self.searches[id(pool)] = self.searches.get(id(pool), 0) + 1
            if n >= MAX_VICTIM_SEARCHES_PER_POOL:
                self.epoch += 1  # from now on no search in this pool: every job's fate moves
            if found is None:
                if not reserved:
                    fkey = (id(pool), job.project)
                    self.failed_search[fkey] = min(self.failed_search.get(fkey, job.gpus), job.gpus)
            elif best is None or found[0] < best[0]:
                on = {pool.names[i] for i, _ in found[1] if i in reserved}
                why = (
                    f"a job of {job.project} holding an approved reservation on {min(on)}"
                    if on
                    else ""
                )
                best = (found[0], pool, found[1], found[2], why)
        if best is not None:
            self._start(job, best[1], best[2], True, best[3], best[4])
            return True
        epoch = self.epoch
        self._reserve(job, fundable)
        if (
            not searched
            and len(pools) == 1
            and self.epoch == epoch
            and self.funded_fail[job.id] == "Priority"
        ):
            # Its pool was blocked already: no placement (a held node it may not backfill),
            # no search, nothing moved. Every job of its shape and lien waits alike until
            # something does (the placement tried read the project, the GPUs and the
            # protection, the search memo only grows): the walk's memo keeps it (``run``).
            self.waits_in, self.waits_lien = pools, True
        return True

    def _greedy(self, job: PendingJob, pools: list[Pool], funded: bool) -> bool:
        for pool in pools:
            if job.kind == "interactive" and not self._lane_room(job, pool):
                continue
            placement = pool.find(job.gpus)
            if placement is not None:
                self._start(job, pool, placement, funded, (), "")
                return True
        self._block(pools)
        self.waits_in = pools
        self.funded_fail[job.id] = "Unfunded" if not funded else "Resources"
        return True

    def _reserve(self, job: PendingJob, pools: list[Pool]) -> None:
        st = self.st
        self.funded_fail[job.id] = "Resources"
        if any(id(p) in self.blocked_pools for p in pools):
            self.funded_fail[job.id] = "Priority"
            return
        best = None
        for pool in pools:
            found = earliest_nodes(st, pool, job)
            if found is not None and (best is None or found[0] < best[0]):
                best = (found[0], pool, found[1], found[2])
        self._block(pools)
        if best is None:
            return
        # Held even when no time is known (start_s infinity): the GPUs that free up there
        # are kept for it, so worse-ranked funded work never overtakes it on them.
        start_s, pool, idxs, blockers = best
        self.epoch += 1
        for i in idxs:
            pool.hold(i, Held(job.id, start_s, job.project))
        self.holder_of[job.id] = (pool, start_s, blockers)
        self.holds.append(HeldReservation(job.id, tuple(pool.names[i] for i in idxs), start_s))
