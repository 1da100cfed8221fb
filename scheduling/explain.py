"""'Why is this consuming GPU-hours': the explanation of one job, for the page and the API.

The engine writes the standing and the preemption sentence at every pass (Job.explanation);
the money side — rate and total so far — comes from the ledger, which is the truth for charges.
"""

from __future__ import annotations

from django.db.models import Sum
from django.utils import timezone

from scheduling import pricing
from scheduling.models import Job
from scheduling.reports import IDLE_AFTER


def funding_chain(job: Job) -> list[str]:
    if not job.project_id:
        return []
    parts = job.project.slug_path.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _priced(job: Job):
    """(GPU type, cost factor) of the nodes the job runs on: the ledger's own price."""
    try:
        row = pricing.gpu_type_row(job)
    except pricing.UnpricedGpuType as exc:
        return exc.name, 0.0  # never placed on a priced node: nothing is charged at a guess
    return row.name, float(row.cost_factor)


def cost_factor(job: Job) -> float:
    return _priced(job)[1]


def charged_gpu_hours(job: Job) -> float:
    from budgets.models import UsageEntry

    total = UsageEntry.objects.filter(job_ref=job.pk).aggregate(t=Sum("cost_gpu_seconds"))["t"]
    return (total or 0) / 3600


def explain_job(job: Job, now=None, viewer=None) -> dict:
    """The contract fields of /api/v1/jobs/{id}/explain/ for any job, running or not; the
    command only for a ``viewer`` allowed to see it."""
    from scheduling.access import can_see_command
    from scheduling.telemetry import idle_sentence

    now = now or timezone.now()
    stored = job.explanation or {}
    running = job.state == Job.State.RUNNING
    gpu_type, factor = _priced(job)
    rate = job.gpus * factor if running else 0.0
    so_far = charged_gpu_hours(job)
    if running and job.funded and job.last_charged_at:
        so_far += job.gpus * factor * max(0.0, (now - job.last_charged_at).total_seconds()) / 3600
    protected = running and job.funded and job.protected_until and job.protected_until > now
    idle = bool(
        running and job.low_utilization_since and now - job.low_utilization_since > IDLE_AFTER
    )
    if not running:
        preemptible_by = f"Nothing: the job is {job.state}, it holds no GPUs."
    else:
        preemptible_by = stored.get("preemptible_by") or "Not yet assessed by a scheduling pass."
    return {
        "job": job.pk,
        "state": job.state,
        "funded": bool(job.funded and running),
        "funding_chain": funding_chain(job) if job.funded else [],
        "project": job.project.slug_path if job.project_id else "",
        "gpus": job.gpus,
        "gpu_type": gpu_type,
        "cost_factor": factor,
        "gpu_hours_per_hour": round(rate, 4),
        "charged_gpu_hours_per_hour": round(rate if job.funded else 0.0, 4),
        "gpu_hours_so_far": round(so_far, 4),
        "protected_until": job.protected_until.isoformat()
        if running and job.protected_until
        else None,
        "protected": bool(protected),
        "funding_ended_at": job.funding_ended_at.isoformat() if job.funding_ended_at else None,
        "funding_note": f"Funding ran out at {job.funding_ended_at:%Y-%m-%d %H:%M:%S} UTC: "
        "its project's budget (or an ancestor's) reached zero after its protection ended; it "
        "runs unallocated, is no longer charged, and any job may preempt it."
        if job.funding_ended_at
        else "",
        "protection_source": stored.get("protection_source") or job.protection_source,
        "standing": stored.get("standing", []),
        "preemptible_by": preemptible_by,
        "nodes": [name for name, _ in job.nodes] if running else [],
        "gpu_utilization": job.gpu_utilization,
        "command": job.command if viewer is not None and can_see_command(viewer, job) else None,
        "idle": idle,
        "idle_message": idle_sentence(
            job, job.gpu_utilization or 0.0, job.low_utilization_since, now, rate
        )
        if idle
        else "",
        "wasted_gpu_hours": round(job.wasted_gpu_seconds / 3600, 2),
    }
