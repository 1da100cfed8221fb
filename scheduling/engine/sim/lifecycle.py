"""A job's life in a replay: it enters the queue, starts, is preempted (and requeued, having
lost what the scenario's preemption cost says), finishes. A base of
``simulator.Simulator``, which applies each pass's decisions through these methods.
"""

from __future__ import annotations

import heapq

from scheduling.engine.model import PendingJob, RunningJob
from scheduling.engine.sim.costs import split_attempt
from scheduling.engine.sim.result import JobState, ResultReport, size_class

# Order of events at one instant: finishes and preemptions free GPUs before starts use them;
# a job that starts and finishes at the same instant (no work left) finishes after its start.
FINISH, PREEMPT, SUBMIT, START = "finish", "preempt", "submit", "start"
EVENT_ORDER = {FINISH: 0, PREEMPT: 1, SUBMIT: 2, START: 3}
_FINISH_AFTER_START = 4
_WAKE, _SUBMIT, _FINISH, _DRAIN, _SAMPLE, _STANDING = 3, 2, 0, 1, 4, 5


class JobLifecycle(ResultReport):
    # ---- event plumbing ----------------------------------------------------------------

    def _push(self, t: float, kind: int, payload=None) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, payload))

    def _event(self, t: float, job_id: str, event: str, nodes="", funded="", order=None):
        if self.record:
            self.seq += 1
            rank = EVENT_ORDER[event] if order is None else order
            self.res.events.append((t, rank, self.seq, job_id, event, nodes, funded))

    def _enqueue(self, state: JobState) -> None:
        s = state.spec
        self.waiters.add(s.id, s.project, s.cluster, s.gpus * self._protection(s), s.gpus)
        self.lien_targets.add(s)
        self._pending_tuple = None
        self.pending[s.id] = PendingJob(
            s.id,
            s.project,
            s.user,
            s.gpus,
            s.submit_s,
            s.min_runtime_s,
            s.cluster,
            kind=s.kind,
            resumable=s.resumable,
            priority=s.priority,
        )

    def _preempted(self, t: float, job_id: str) -> None:
        r = self._stop(job_id)
        state = self.jobs[job_id]
        state.attempt += 1
        kept, lost = split_attempt(t - r.start_s, state.overhead_s, self.cost, r.resumable)
        state.left_s = max(0.0, state.left_s - kept) if r.resumable else state.spec.duration_s
        self.res.wasted[r.project] += lost * r.gpus * self.node_cost[r.nodes[0][0]]
        self.res.preemptions += 1
        self.res.preempted[job_id] = self.res.preempted.get(job_id, 0) + 1
        if r.funded and t < r.protected_until_s:
            self.res.protected_preemptions += 1
        self._enqueue(state)
        self._event(t, job_id, PREEMPT, _names(r.nodes))

    def _started(self, t: float, s) -> None:
        pj = self.pending.pop(s.job_id)
        self._pending_tuple = None
        self.waiters.remove(s.job_id)
        self.lien_targets.remove(s.job_id)
        state = self.jobs[s.job_id]
        r = RunningJob(
            pj.id,
            pj.project,
            pj.user,
            pj.gpus,
            s.nodes,
            t,
            s.protected_until_s,
            s.funded,
            pj.kind,
            pj.resumable,
            pj.submit_s,
        )
        self.running[pj.id] = r
        self._rates(r, +1)
        if state.first_start_s is None:
            state.first_start_s = t
            wait = t - pj.submit_s
            self.res.waits[pj.project].append(wait)
            self.res.wait_by_size[size_class(pj.gpus)].append(wait)
        # a restart first pays its overhead (none without the scenario's preemption key)
        state.overhead_s = self.cost.restart_overhead_s if state.attempt else 0.0
        self._push(t + state.overhead_s + state.left_s, _FINISH, (pj.id, state.attempt))
        if s.funded and s.protected_until_s > t:
            self._push(s.protected_until_s, _WAKE)
        self._event(t, pj.id, START, _names(s.nodes), str(s.funded).lower())


def _names(nodes) -> str:
    return ";".join(n for n, _ in nodes)
