"""What preemption and fragmentation cost in a replay.

Preemption (scenario key ``preemption: {checkpoint_interval_s: N, restart_overhead_s: M}``):

1. Every start after a preemption first pays ``restart_overhead_s`` (reloading the checkpoint,
   warming up) before the job makes progress again; the first start pays nothing.
2. A resumable job checkpoints every ``checkpoint_interval_s`` of progress within an attempt;
   when preempted it keeps the progress up to its last checkpoint and loses the rest. A job
   that is not resumable loses everything it did in the attempt.
3. Wasted GPU-seconds of a preemption = (overhead actually run + progress lost) x GPUs x cost.

Without the key, the interval and the overhead are 0: a resumable job keeps every second it ran
and restarts at once (the free preemption of the original simulator), so existing scenarios
keep their meaning; a job that is not resumable still loses its attempt (it always did), and
that loss is reported as wasted.

Fragmentation: GPUs that sit idle (not drained) on a cluster while a job that its project's
budget could fund waits for a placement there. A pass that left such a job waiting beside
idle GPUs could not give it a placement on them (best fit, gang rule, held nodes), so every
idle GPU-second until the next event counts. The total counts each idle GPU-second once; a
project's figure counts the idle GPU-seconds while one of its own jobs waited (the per-project
figures overlap when several projects wait at once).

Idle while fits: GPUs idle (on a node not being drained, running nothing) while a waiting job
its project's budget could fund would fit on them under the engine's gang rule: n GPUs on one
node with at least n free, or, for a job larger than a node, whole free nodes, enough of them.
An idle GPU counts when some such job has a placement on free GPUs that includes it: a node's
free GPUs count when the smallest fundable single-node job waiting for that cluster fits
there, and every whole free node counts when the smallest fundable multi-node job fits on the
whole free nodes. These are the GPUs a pass left idle with work for them waiting: held for a
larger job (what a hold costs), or idle until the next pass (what the pass interval costs).
The figure is a rate that changes only at submits, finishes, drains and passes, and is
integrated exactly between them; which jobs are fundable is decided on the balances the last
pass saw (the engine decides funding at passes too).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class PreemptionCost:
    checkpoint_interval_s: float = 0.0
    restart_overhead_s: float = 0.0

    def kept(self, progress_s: float, resumable: bool) -> float:
        """Progress of an attempt that survives its preemption."""
        if not resumable:
            return 0.0
        ci = self.checkpoint_interval_s
        if ci <= 0:
            return progress_s
        return math.floor(progress_s / ci + 1e-9) * ci


def split_attempt(ran_s: float, overhead_s: float, cost: PreemptionCost, resumable: bool):
    """(progress kept, GPU-seconds per GPU wasted) for an attempt of ``ran_s`` seconds whose
    first ``overhead_s`` seconds were restart overhead."""
    overhead_run = min(ran_s, overhead_s)
    progress = ran_s - overhead_run
    kept = cost.kept(progress, resumable)
    return kept, overhead_run + (progress - kept)


class FundableWaiters:
    """Which projects have a waiting job their remaining budget could fund, per cluster.

    Each (project, cluster or None) keeps a heap of the liens (GPU-seconds before the cost
    factor) of its waiting jobs, with lazy deletion: a pass asks only for the smallest lien
    per project, so the check is O(projects) per pass, not O(waiting jobs)."""

    def __init__(self) -> None:
        self.heaps: dict[tuple[str, str | None], list[tuple[float, str]]] = {}
        self.waiting: set[str] = set()
        # the same liens by job size: (project, cluster or None) -> {GPUs: heap}
        self.sizes: dict[tuple[str, str | None], dict[int, list[tuple[float, str]]]] = {}

    def add(
        self, job_id: str, project: str, cluster: str | None, lien_s: float, gpus: int = 0
    ) -> None:
        if not project:
            return
        self.waiting.add(job_id)
        heapq.heappush(self.heaps.setdefault((project, cluster), []), (lien_s, job_id))
        by_size = self.sizes.setdefault((project, cluster), {})
        heapq.heappush(by_size.setdefault(gpus, []), (lien_s, job_id))

    def smallest_on(
        self, cluster: str, cost: float, node_gpus: int, remaining: dict[str, float]
    ) -> tuple[int, int]:
        """(smallest single-node, smallest multi-node) GPU count among the waiting jobs for
        ``cluster`` that their project's remaining could fund there; 0 when there is none."""
        single, multi = 0, 0
        for (project, where), by_size in self.sizes.items():
            if where is not None and where != cluster:
                continue
            left = remaining.get(project, 0.0)
            if left <= 0:
                continue
            for gpus, heap in by_size.items():
                if single and gpus >= single and (gpus <= node_gpus or (multi and gpus >= multi)):
                    continue
                while heap and heap[0][1] not in self.waiting:
                    heapq.heappop(heap)
                if not heap or heap[0][0] * cost > left:
                    continue
                if gpus <= node_gpus:
                    if not single or gpus < single:
                        single = gpus
                elif not multi or gpus < multi:
                    multi = gpus
        return single, multi

    def remove(self, job_id: str) -> None:
        self.waiting.discard(job_id)

    def projects_on(self, clusters: dict[str, float], remaining: dict[str, float]):
        """{cluster: set of projects with a fundable waiting job there} given each cluster's
        cost factor and each project's remaining (cost-normalised GPU-seconds)."""
        out: dict[str, set[str]] = {c: set() for c in clusters}
        for (project, cluster), heap in self.heaps.items():
            while heap and heap[0][1] not in self.waiting:
                heapq.heappop(heap)
            if not heap:
                continue
            left = remaining.get(project, 0.0)
            if left <= 0:
                continue
            lien = heap[0][0]
            for c, cost in clusters.items():
                if (cluster is None or cluster == c) and lien * cost <= left:
                    out[c].add(project)
        return out
