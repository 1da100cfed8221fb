"""What a preemption costs in work, by the simulator's cost model (engine/sim/costs.py).

A job that is not resumable loses its whole run since its last start. A resumable job keeps
its progress up to its last checkpoint (one every ``ALLOT_CHECKPOINT_INTERVAL_S`` of
progress within a run; a restart's first ``ALLOT_RESTART_OVERHEAD_S`` is reloading, not
progress) and loses the rest, plus the restart overhead its next start pays. Counted once,
when the preemption is applied, and kept on its timeline event (``JobEvent.lost_gpu_seconds``):
the run's length is known exactly then and never again without replaying the timeline.

An estimate: Allot does not see a job's checkpoints. The defaults (30 min, 5 min) are the
scenario example's; a site whose jobs checkpoint otherwise sets the two settings.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings

from scheduling.engine.sim.costs import PreemptionCost, split_attempt


def cost_model() -> PreemptionCost:
    return PreemptionCost(
        float(settings.ALLOT_CHECKPOINT_INTERVAL_S), float(settings.ALLOT_RESTART_OVERHEAD_S)
    )


def lost_gpu_seconds(job, now: datetime) -> int:
    """GPU-seconds of work the preemption of ``job``'s current run at ``now`` costs."""
    if job.started_at is None:
        return 0
    ran = max(0.0, (now - job.started_at).total_seconds())
    if not job.resumable:
        return int(ran * job.gpus)
    cost = cost_model()
    # the first run pays no overhead; a restart's overhead was counted at the preemption
    # before it, so only the progress since the checkpoint counts here, and the next one's
    overhead = cost.restart_overhead_s if job.attempt > 1 else 0.0
    kept, wasted = split_attempt(ran, overhead, cost, True)
    lost_progress = wasted - min(ran, overhead)
    return int((lost_progress + cost.restart_overhead_s) * job.gpus)
