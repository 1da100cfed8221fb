"""Placing and starting jobs in a pass: the interactive lane, unfunded backfill, starts
and preemptions.

A base of ``scheduling.engine.passes.Pass``, through ``FundedSteps`` (steps 5 and 7 of its
docstring, and the ``_start``/``_preempt`` every step ends in). The preemption messages are
matched by ``scheduling.reports.CAUSES``.
"""

from __future__ import annotations

from scheduling.engine.model import Displacement, PendingJob, Preempt, RunningJob, Start
from scheduling.engine.pass_memo import INF, QueueMemo
from scheduling.engine.placement import Held, Pool
from scheduling.engine.preempt import find_victims


class PlaceSteps(QueueMemo):
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
