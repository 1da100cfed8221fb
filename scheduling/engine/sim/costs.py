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

    def add(self, job_id: str, project: str, cluster: str | None, lien_s: float) -> None:
        if not project:
            return
        self.waiting.add(job_id)
        heapq.heappush(self.heaps.setdefault((project, cluster), []), (lien_s, job_id))

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
