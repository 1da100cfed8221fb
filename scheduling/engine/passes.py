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

``Pass`` keeps the pass state, steps 1 to 3 and the loops of ``run``; its other methods come
from its bases, one chain: ``pass_funded`` (step 6), ``pass_place`` (steps 5 and 7, starts,
preemptions) and ``pass_memo`` (the fast paths of a saturated queue and their memo, and the
pass state's declared types).
"""

from __future__ import annotations

import gc
from dataclasses import replace

from scheduling.engine.explain import drain_times, explanations
from scheduling.engine.model import (
    Decisions,
    Defund,
    Displacement,
    PendingJob,
    Snapshot,
)
from scheduling.engine.pass_context import FLAT, PassContext, Segment, shape
from scheduling.engine.pass_funded import FundedSteps
from scheduling.engine.pass_memo import INF, MAX_VICTIM_SEARCHES_PER_POOL, Waits
from scheduling.engine.placement import Held
from scheduling.engine.report import pending_infos
from scheduling.engine.state import PassState

__all__ = ["INF", "MAX_VICTIM_SEARCHES_PER_POOL", "Pass", "run_pass"]


class Pass(FundedSteps):
    def __init__(self, snap: Snapshot, details: bool = True, context: PassContext | None = None):
        self.details = details
        self.context = context  # optional: the queue kept in order between passes
        self.st = PassState(snap, context.repeats.tree_of(snap) if context else None)
        self.fairshare = snap.policy.name == "fairshare"
        self.starts = []
        self.preempts = []
        self.defunds = []
        self.holds = []
        self.started = set()
        self.funded_fail = {}  # job id -> why it waits (code)
        self.holder_of = {}
        self.blocked_pools = set()  # pools where a better-ranked job waits
        self.searches = {}
        # Smallest job that found no victims, per (pool, project). A job's victim set is
        # fixed by its project (which projects rank strictly below it, with the hysteresis
        # and the displacement memory) and its size; within a pass, free + yieldable GPUs
        # on every node only shrink (starts add protected work, holds remove nodes), so a
        # job of the same project that is no smaller cannot find victims either. Rank order
        # says nothing across projects: under the hierarchy a worse-ranked job may preempt
        # where a better-ranked one may not (P/b/d inside P/b, where P/a cannot).
        self.failed_search = {}
        # Bumped whenever the pools or the search counts change: ``_saturated`` reads only
        # those, so its answer is reused until the next change.
        self.epoch = 0
        self.waits_in = None  # set by _try_funded: see run()
        self.waits_lien = False  # set by _try_funded: the wait holds for its lien only
        self._saturated_at = (-1, False)
        self._full_at = (-1, False)
        self._min_gpus = None
        self.failed_alike = {}  # see _alike
        self._alike_epoch = -1
        self._funded_projects = []
        self._alike_of = {}
        self._funded_key = ()
        self._alike_moved = None
        self._fitting = {}  # (cluster, GPU type, GPUs) -> pools

    # ---- steps ---------------------------------------------------------------------------

    def budget_floor(self) -> None:
        st = self.st
        now = st.now
        out_of: dict[str, str] = {}  # per project: the balances do not move here
        due = [j.id for j in st.running.values() if j.funded and now >= j.protected_until_s]
        for jid in sorted(due):
            job = st.running[jid]
            path = out_of.get(job.project)
            if path is None:
                path = out_of[job.project] = st.out_of(job.project)
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
        segments, kept = self._queue()
        lane = st.policy.interactive_pool_gpus
        interactive = []  # the lane, when some cluster has one (only they start there)
        if self.fairshare and any(gpus > 0 for gpus in lane.values()):
            interactive = [j for seg in segments for j in seg[0] if j.kind == "interactive"]
        deferred: list[PendingJob] = []
        for job in interactive:
            if any(lane.get(p.cluster, 0) > 0 for p in st.pools_for(job)):
                if not self._try_interactive(job):
                    deferred.append(job)
        saturated = stop = False
        # A job that waits because nothing fits its pools and no search can help there
        # (``_hopeless``/``_quiet``; under a baseline, no placement) is followed by every job
        # of its shape (project, pools, GPUs) until something starts, preempts, holds, blocks
        # or spends a pool's search budget (``epoch``): only the lien, which differs with the
        # protection, is checked per job (``_waits``). Most of a saturated queue waits so. A
        # failed victim search moves nothing here: it only takes options away (a search
        # budget used, a smaller failed size), so a shape that waited still waits.
        waits: Waits = {}
        funded_fail = self.funded_fail
        left_of, protection = st.left, st.protection
        # With a context (and no details to report), a run of a group's jobs whose shapes
        # all hit that memo and which the project can all fund is settled at once
        # (``_skip``): each would wait for Priority and change nothing.
        skips = kept and self.fairshare and not self.details
        for queue, keys, bases, group in segments:
            probe = skips and group is not None and not group.lane
            pos, end = -1, len(queue)
            while pos + 1 < end:
                pos += 1
                job, key, base = queue[pos], keys[pos], bases[pos]
                if probe:
                    probe = False
                    n = self._skip(group, pos, waits)
                    if n < 0:
                        saturated = True
                        break
                    if n:
                        pos += n - 1  # passed over: the next job visited is at pos + n
                        continue
                if job.id in self.started or job.id in funded_fail:
                    continue
                if key is None:  # an interactive session
                    if not self._interactive_ok(job):
                        funded_fail[job.id] = "InteractiveLimit"
                        continue
                else:  # the lane and its per-user limit are not a matter of shape
                    hit = waits.get(key)
                    if not (hit and hit[0] == self.epoch):  # a wait for its shape and lien?
                        if base is None:
                            base = job.gpus * protection(job)
                        hit = waits.get((key, base))
                    funded = None
                    if hit and hit[0] == self.epoch:
                        if hit[2]:  # fair share: can_fund in its cheapest pool, inlined
                            left = left_of(job.project)
                            if base is None:
                                base = job.gpus * protection(job)
                            funded = left > 0 and left >= base * hit[2]
                            if funded:
                                funded_fail[job.id] = "Priority"
                        else:
                            funded = self._waits(job, hit[1])
                    if funded is not None:
                        if not funded:
                            deferred.append(job)
                        elif self.fairshare and self._saturated():
                            saturated = True
                            break
                        continue
                epoch = self.epoch
                funded = self._try_funded(job)  # (sets waits_in and waits_lien)
                probe = skips and group is not None and not group.lane
                if key is not None and self.waits_in is not None and self.epoch == epoch:
                    cheapest = 0.0  # a baseline, or a project that can fund nothing: _waits
                    if self.fairshare and job.project and job.project in st.tree.nodes:
                        cheapest = min(st.cost(p.gpu_type) for p in self.waits_in)
                    if self.waits_lien:  # its shape with its lien (GPUs x protection) only
                        if base is None:
                            base = job.gpus * protection(job)
                        key = (key, base)
                    waits[key] = (epoch, self.waits_in, cheapest)
                if not funded:
                    deferred.append(job)
                elif job.id not in self.started and self.fairshare and self._saturated():
                    saturated = True  # nothing can start any more: the rest simply wait
                    break
                elif not self.fairshare and not self.details and self._baseline_full(queue):
                    stop = True  # without details: the rest of the greedy queue can only wait
                    break
            if saturated or stop:
                break
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
            waiting = [j for seg in segments for j in seg[0] if j.id not in self.started]
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

    def _queue(self) -> tuple[list[Segment], bool]:
        """The waiting jobs that are not held, in the policy's order, as segments of the
        queue (``PassContext.queue``: each one's jobs, their shapes, the walk's memo key,
        their GPUs x protection, None where computed when needed, and the group, if one),
        and whether they come from the context: under fair share, its groups; under a
        baseline, one segment kept in its order (``PassContext.flat_queue``); else one
        segment sorted here."""
        st = self.st
        if self.context is not None and self.fairshare:
            got = self.context.queue(st)
            if got is not None:
                return got, True
        elif self.context is not None and st.policy.name in FLAT:  # kept in its order
            flat = self.context.flat_queue(st)
            if flat is not None:
                self._min_gpus = min(self.context.flat_gpus, default=1)  # (_baseline_full)
                return [(*flat, None)], True
        queue = st.queue(j for j in st.snap.pending if not j.held)
        return [(queue, [shape(j) for j in queue], [None] * len(queue), None)], False

    def _memory(self) -> tuple[Displacement, ...]:
        st = self.st
        if not st.memory and not st.new_memory:
            return ()
        kept = [d for d, _, _ in st.memory if d.by_id in st.running]
        new = [d for d in st.new_memory if d.by_id in st.running]
        if not new and len(kept) == len(st.snap.displacements):
            return st.snap.displacements  # nothing ended, left or came: the same memory
        return tuple(kept + new)


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
