"""One scheduling pass: Snapshot in, Decisions out.

Steps of ``run_pass``:

1. Build the working state: the Fair Tree ranking, per-pool free capacity, running jobs.
2. Budget floor: a funded run past its protection whose project, or any ancestor, has no
   balance left becomes unallocated (``Decisions.defunded``): no longer charged and
   preemptible by anyone. During its protection its lien covers it.
   Drains: preempt every job on a drained node whose protection has ended (unfunded work has
   none); the rest stay until their protection ends.
3. Approved reservations (``Snapshot.reservations``) hold whole nodes of their cluster from
   their start; others may only backfill them with work that yields before that start. Once
   the window has opened, the project's jobs may preempt other projects' unprotected work
   there, whatever its rank (``preempt.open_reserved``); protected work stays.
4. Order the queue by the policy (fairshare: Fair Tree rank, user usage, submit time, id).
5. Interactive lane first: on clusters with an interactive pool, sessions start within the
   pool's size and the per-user limit, displacing unfunded or unprotected batch work if needed.
6. Funded jobs in order: place (best fit); else preempt the smallest set of victims; else (the
   first such job of a pool) reserve the nodes that free up soonest and hold them.
7. Unfunded jobs in order, on whatever capacity is left: free, and preemptible at any time.
8. Report a pending reason, queue position and estimated start for every job still waiting,
   an explanation for every running job, and when each drained node will be empty.

The ``priority`` and ``fifo`` baselines use the same placement but their own order and no
preemption or reservations: the greedy queue a lab runs without Allot.
"""

from __future__ import annotations

import gc
import math
from dataclasses import replace

from scheduling.engine.model import (
    Decisions,
    Defund,
    Displacement,
    HeldReservation,
    PendingJob,
    Preempt,
    RunningJob,
    Snapshot,
    Start,
)
from scheduling.engine.placement import Held, Pool
from scheduling.engine.preempt import (
    earliest_nodes,
    find_victims,
    open_reserved,
    reserved_preemptible,
)
from scheduling.engine.report import drain_times, explanations, pending_infos
from scheduling.engine.state import PassState

INF = math.inf
MAX_VICTIM_SEARCHES_PER_POOL = 16  # bounds a pass on a saturated cluster (cf. bf_max_job_test)


class Pass:
    def __init__(self, snap: Snapshot, details: bool = True):
        self.details = details
        self.st = PassState(snap)
        self.fairshare = snap.policy.name == "fairshare"
        self.starts: list[Start] = []
        self.preempts: list[Preempt] = []
        self.defunds: list[Defund] = []
        self.holds: list[HeldReservation] = []
        self.started: set[str] = set()
        self.funded_fail: dict[str, str] = {}  # job id -> why it waits (code)
        self.holder_of: dict[str, tuple[Pool, float]] = {}
        self.blocked_pools: set[int] = set()  # pools where a better-ranked job waits
        self.searches: dict[int, int] = {}
        # Smallest job that found no victims, per (pool, project). A job's victim set is
        # fixed by its project (which projects rank strictly below it, with the hysteresis
        # and the displacement memory) and its size; within a pass, free + yieldable GPUs
        # on every node only shrink (starts add protected work, holds remove nodes), so a
        # job of the same project that is no smaller cannot find victims either. Rank order
        # says nothing across projects: under the hierarchy a worse-ranked job may preempt
        # where a better-ranked one may not (P/b/d inside P/b, where P/a cannot).
        self.failed_search: dict[tuple[int, str], int] = {}
        # Bumped whenever the pools or the search counts change: ``_saturated`` reads only
        # those, so its answer is reused until the next change.
        self.epoch = 0
        self.version: dict[str, int] = {}  # per project: bumped when its search memo moves
        self.waits_in: list[Pool] | None = None  # set by _try_funded: see run()
        self._saturated_at: tuple[int, bool] = (-1, False)
        self._full_at: tuple[int, bool] = (-1, False)
        self._min_gpus: int | None = None
        self.failed_alike: dict[tuple, int] = {}  # see _alike
        self._alike_epoch = -1
        self._funded_projects: list[str] = []

    # ---- steps ---------------------------------------------------------------------------

    def budget_floor(self) -> None:
        st = self.st
        for jid in sorted(st.running):
            job = st.running[jid]
            if not job.funded or st.now < job.protected_until_s:
                continue
            path = st.out_of(job.project)
            if not path:
                continue
            st.running[jid] = replace(job, funded=False, protection_source="none (unfunded)")
            self.defunds.append(
                Defund(
                    jid,
                    st.now,
                    path,
                    f"The budget of {path} ran out after its protection ended; it now runs "
                    "unfunded and any job may preempt it.",
                )
            )

    def drains(self) -> None:
        st = self.st
        for pool in st.pools.values():
            for i, drained in enumerate(pool.drained):
                if not drained:
                    continue
                for jid in sorted(pool.jobs[i]):
                    job = st.running.get(jid)
                    if job is not None and (not job.funded or st.now >= job.protected_until_s):
                        self._preempt(
                            job,
                            None,
                            f"Node {pool.names[i]} is draining for maintenance and "
                            "this job's protection has ended.",
                        )

    def approved_reservations(self) -> None:
        st = self.st
        for res in sorted(st.snap.reservations, key=lambda r: (r.start_s, r.id)):
            if res.end_s <= st.now:
                continue
            pools = [p for k, p in sorted(st.pools.items()) if k[0] == res.cluster]
            left = res.gpus
            for pool in pools:
                for i in range(len(pool.names) - 1, -1, -1):  # from the end: stable choice
                    if left <= 0:
                        break
                    if pool.drained[i] or i in pool.held:
                        continue
                    pool.hold(i, Held(f"reservation:{res.id}", res.start_s, res.project, True))
                    left -= pool.size[i]

    def run(self) -> Decisions:
        st = self.st
        self.budget_floor()
        self.drains()
        self.approved_reservations()
        queue = st.queue(j for j in st.snap.pending if not j.held)
        lane = st.policy.interactive_pool_gpus
        interactive = []  # the lane, when some cluster has one (only they start there)
        if self.fairshare and any(gpus > 0 for gpus in lane.values()):
            interactive = [j for j in queue if j.kind == "interactive"]
        deferred: list[PendingJob] = []
        for job in interactive:
            if any(lane.get(p.cluster, 0) > 0 for p in st.pools_for(job)):
                if not self._try_interactive(job):
                    deferred.append(job)
        saturated = False
        # A job that waits because nothing fits its pools and no search can help there
        # (``_hopeless``/``_quiet``; under a baseline, no placement) is followed by every job
        # of its shape (project, pools, GPUs) until something starts, preempts, holds,
        # searches or blocks (``epoch``; a failed victim search moves only its project's
        # ``version``): only the lien, which differs with the protection, is checked per job
        # (``_waits``). Most of a saturated queue waits this way.
        waits: dict[tuple, tuple[int, int, list[Pool], float]] = {}
        funded_fail, version = self.funded_fail, self.version
        left_of, protection = st.left, st.protection
        for job in queue:
            if job.id in self.started or job.id in funded_fail:
                continue
            key = None
            if job.kind == "interactive":
                if not self._interactive_ok(job):
                    funded_fail[job.id] = "InteractiveLimit"
                    continue
            else:  # the lane and its per-user limit are not a matter of shape
                key = (job.project, job.cluster, job.gpu_type, job.gpus)
                hit = waits.get(key)
                funded = None
                if hit and hit[0] == self.epoch and hit[1] == version.get(job.project, 0):
                    if hit[3]:  # fair share: can_fund in its cheapest pool, inlined
                        left = left_of(job.project)
                        funded = left > 0 and left >= job.gpus * protection(job) * hit[3]
                        if funded:
                            funded_fail[job.id] = "Priority"
                    else:
                        funded = self._waits(job, hit[2])
                if funded is not None:
                    if not funded:
                        deferred.append(job)
                    elif self.fairshare and self._saturated():
                        saturated = True
                        break
                    continue
            epoch, mine = self.epoch, version.get(job.project, 0)
            self.waits_in = None
            funded = self._try_funded(job)
            if (
                key is not None
                and self.waits_in is not None
                and self.epoch == epoch
                and version.get(job.project, 0) == mine
            ):
                cheapest = 0.0  # a baseline, or a project that can fund nothing: _waits
                if self.fairshare and job.project and job.project in st.tree.nodes:
                    cheapest = min(st.cost(p.gpu_type) for p in self.waits_in)
                waits[key] = (epoch, mine, self.waits_in, cheapest)
            if not funded:
                deferred.append(job)
            elif job.id not in self.started and self.fairshare and self._saturated():
                saturated = True  # nothing can start any more: the rest simply wait
                break
            elif not self.fairshare and not self.details and self._baseline_full(queue):
                break  # without details: the rest of the greedy queue can only wait
        unfunded = sorted({j.id: j for j in deferred}.values(), key=st.order_key)
        # An unfunded job that found no place leaves everything as it was; so does every
        # later job of its shape until something starts (the backfill rule reads only the
        # project, against the holders' subtrees).
        no_place: dict[tuple, int] = {}
        for job in [] if saturated else unfunded:
            if job.id in self.started or job.id in self.funded_fail:
                continue
            if job.kind == "interactive":
                if not self._interactive_ok(job):
                    self.funded_fail[job.id] = "InteractiveLimit"
                    continue
                self._try_unfunded(job)
                continue
            key = (job.project, job.cluster, job.gpu_type, job.gpus)
            if no_place.get(key) == self.epoch:
                self.funded_fail[job.id] = "Unfunded"
                continue
            epoch = self.epoch
            self._try_unfunded(job)
            if self.epoch == epoch:
                no_place[key] = epoch
        pending = {}
        if self.details:
            waiting = [j for j in queue if j.id not in self.started]
            waiting += [j for j in st.snap.pending if j.held]
            pending = pending_infos(self, waiting)
        return Decisions(
            starts=tuple(self.starts),
            preemptions=tuple(self.preempts),
            reservations=tuple(self.holds),
            pending=pending,
            explanations=explanations(st) if self.details else {},
            drains=drain_times(st),
            displacements=self._memory(),
            defunded=tuple(self.defunds),
        )

    def _memory(self) -> tuple[Displacement, ...]:
        st = self.st
        if not st.memory and not st.new_memory:
            return ()
        kept = [d for d, _, _ in st.memory if d.by_id in st.running]
        return tuple(kept + [d for d in st.new_memory if d.by_id in st.running])

    # ---- helpers -------------------------------------------------------------------------

    def _interactive_ok(self, job: PendingJob) -> bool:
        st = self.st
        return st.interactive_by_user.get(job.user, 0) < st.policy.interactive_per_user

    def _lane_room(self, job: PendingJob, pool: Pool) -> bool:
        """On a cluster with an interactive pool, every session counts against it, funded or
        not (an unfunded session used to bypass it through the unfunded path)."""
        st = self.st
        cap = st.policy.interactive_pool_gpus.get(pool.cluster, 0)
        return cap <= 0 or st.interactive_gpus.get(pool.cluster, 0) + job.gpus <= cap

    def _try_interactive(self, job: PendingJob) -> bool:
        st = self.st
        if not self._interactive_ok(job):
            self.funded_fail[job.id] = "InteractiveLimit"
            return True
        for pool in st.pools_for(job):
            cap = st.policy.interactive_pool_gpus.get(pool.cluster, 0)
            if st.interactive_gpus.get(pool.cluster, 0) + job.gpus > cap:
                continue
            if not st.can_fund(job, pool):
                return False  # no lien, no lane: it waits like any unfunded job
            placement = pool.find(job.gpus)
            victims: tuple[str, ...] = ()
            if placement is None:
                found = find_victims(st, pool, job, any_rank=True)
                if found is None:
                    continue
                _, placement, victims = found
            self._start(job, pool, placement, True, victims, "an interactive session")
            return True
        self.funded_fail[job.id] = "InteractiveLimit"
        return True

    def _try_funded(self, job: PendingJob) -> bool:
        """Place a funded job or record why it waits. False: it is unfunded (try later)."""
        st = self.st
        pools = st.pools_for(job)
        if job.kind == "interactive" and st.policy.interactive_pool_gpus:
            pools = [p for p in pools if self._lane_room(job, p)]
            if not pools:
                self.funded_fail[job.id] = "InteractiveLimit"
                return True
        if not all(p.fits_ever(job.gpus) for p in pools):
            pools = [p for p in pools if p.fits_ever(job.gpus)]
            if not pools:  # it can never fit: it must not block the jobs behind it
                self.funded_fail[job.id] = "ExceedsCapacity"
                return True
        if len(pools) == 1 and self.fairshare and self._hopeless(pools[0], job):
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
        best = None
        for pool in fundable if st.policy.preemption else ():
            reserved = open_reserved(st, pool, job)  # its own reservation: always searched
            futile = self._search_futile(pool, job.project, job.gpus)
            if not pool.fits_ever(job.gpus) or (futile and not reserved):
                continue
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
            else:  # only this project's memo moved
                self.version[job.project] = self.version.get(job.project, 0) + 1
            if found is None:
                if not reserved:
                    key = (id(pool), job.project)
                    self.failed_search[key] = min(self.failed_search.get(key, job.gpus), job.gpus)
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
        self._reserve(job, fundable)
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

    def _baseline_full(self, queue: list[PendingJob]) -> bool:
        """A baseline places jobs on free, unheld GPUs only and never preempts: once no pool
        has one, no job that needs a GPU can start, and nothing else happens to it (its
        reason, left out without details). Checked when the pools last changed."""
        epoch, full = self._full_at
        if epoch != self.epoch:
            full = all(p.max_free() == 0 for p in self.st.pools.values())
            if full and self._min_gpus is None:
                self._min_gpus = min((j.gpus for j in queue), default=1)
            full = full and self._min_gpus >= 1
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
            self._funded_projects = sorted({r.project for r in st.running.values() if r.funded})
        below = st.tree.strictly_below
        preemptor = job.project
        return (
            self.epoch,
            id(pool),
            tuple(below(p, preemptor) for p in self._funded_projects),
            st.shielded_from(preemptor),
        )

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

    def _backfill_rule(self, job: PendingJob, pool: Pool, funded: bool):
        st = self.st

        def usable(h: Held) -> bool:
            if h.project and (job.project == h.project or job.project.startswith(h.project + "/")):
                return h.reservation  # an approved reservation serves its whole subtree
            if not funded:
                return True  # preemptible at any moment
            if h.start_s == INF or st.now + st.protection(job) > h.start_s:
                return False  # it could still hold the GPUs when the holder may start
            return h.reservation or st.tree.strictly_below(job.project, h.project)

        return usable

    def _try_unfunded(self, job: PendingJob) -> None:
        st = self.st
        lane_full = False
        for pool in st.pools_for(job):
            if job.kind == "interactive" and not self._lane_room(job, pool):
                lane_full = True
                continue
            placement = pool.find(job.gpus, self._backfill_rule(job, pool, False))
            if placement is not None:
                self._start(job, pool, placement, False, (), "")
                return
        self.funded_fail[job.id] = "InteractiveLimit" if lane_full else "Unfunded"

    def _start(self, job, pool: Pool, placement, funded: bool, victims, why: str) -> None:
        st = self.st
        self.epoch += 1
        for vid in victims:
            victim = st.running[vid]
            if not victim.funded:
                reason = (
                    f"It ran unfunded and job {job.id} of {job.project or 'no project'} "
                    "needed the GPUs."
                )
            elif why:
                reason = f"Its protection had ended and {why} ({job.id}) needed the GPUs."
            else:
                reason = (
                    f"Its protection had ended and job {job.id} of {job.project} ranks above "
                    f"{victim.project} in the budget tree."
                )
                st.new_memory.append(
                    Displacement(victim.id, victim.project, job.id, job.project, st.now)
                )
            self._preempt(victim, job.id, reason)
        nodes = tuple((pool.names[i], g) for i, g in placement)
        protected = st.now + st.protection(job) if funded else st.now
        if funded:
            st.spend(job.project, st.lien(job, pool))
        run = RunningJob(
            job.id,
            job.project,
            job.user,
            job.gpus,
            nodes,
            st.now,
            protected,
            funded,
            job.kind,
            job.resumable,
            job.submit_s,
            "exception" if job.max_protection_s is not None else "contract",
        )
        for i, g in placement:
            pool.take(i, job.id, g)
        st.running[job.id] = run
        if job.kind == "interactive":
            st.interactive_by_user[job.user] = st.interactive_by_user.get(job.user, 0) + 1
            st.interactive_gpus[pool.cluster] = st.interactive_gpus.get(pool.cluster, 0) + job.gpus
        self.started.add(job.id)
        self.starts.append(Start(job.id, nodes, funded, protected))

    def _preempt(self, job: RunningJob, by: str | None, reason: str) -> None:
        self.epoch += 1
        self.st.remove_running(job.id)
        self.preempts.append(Preempt(job.id, reason, by, True))


def run_pass(snapshot: Snapshot, details: bool = True) -> Decisions:
    """``details=False`` skips pending reasons and explanations (the simulator's fast path).

    The cyclic garbage collector is paused for the pass (and resumed after, if it was on): a
    pass allocates some 10^5 short-lived objects and makes no reference cycles, so the
    collections it would trigger find nothing, yet one of them walks every object of the
    snapshot (about 15 % of a 10,000-job pass). Reference counting still frees everything."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return Pass(snapshot, details).run()
    finally:
        if enabled:
            gc.enable()
