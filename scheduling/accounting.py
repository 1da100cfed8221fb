"""GPU-hour accounting for running jobs: liens at start, charges per interval, release at end.

Only funded occupancy is charged; unfunded work is free. Charging is idempotent per job ×
interval: the ledger's (job_ref, interval_start) is unique and a job's ``last_charged_at``
advances with a conditional UPDATE in the same transaction, so a retried or concurrent charge
records each second once.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from portal.faults import fault_point
from scheduling.models import Job


def _gpu_type(job: Job, known: dict | None = None):
    """The job's GPU type row; ``known`` caches rows by name across the jobs of one charge."""
    from budgets.models import GpuType

    name = job.cluster.gpu_type
    if known is not None and name in known:
        return known[name]
    gpu_type, _ = GpuType.objects.get_or_create(name=name, defaults={"cost_factor": Decimal(1)})
    if known is not None:
        known[name] = gpu_type
    return gpu_type


def protected_window_cost(job: Job, cost_factor: Decimal, protected_s: int) -> int:
    return int(Decimal(job.gpus * protected_s) * cost_factor)


def hold_start_lien(job: Job, protected_s: int) -> bool:
    """Hold the protected window's cost. False when the balance no longer covers it (another
    cluster's pass spent it first): the job then runs unfunded."""
    from budgets import ledger
    from budgets.errors import InsufficientFunds

    if not job.funded or job.project_id is None:
        return False
    gpu_type = _gpu_type(job)
    try:
        with transaction.atomic():
            ledger.hold_lien(
                job.project, job.pk, protected_window_cost(job, gpu_type.cost_factor, protected_s)
            )
    except InsufficientFunds:
        Job.objects.filter(pk=job.pk).update(funded=False)
        job.funded = False
        return False
    return True


def _charge_until(job: Job, until: datetime, known_types: dict | None = None) -> int:
    """Charge [last_charged_at, until) for one job; return the GPU-seconds charged."""
    from budgets import ledger

    start = job.last_charged_at or job.started_at
    if not job.funded or job.project_id is None or start is None or until <= start:
        return 0
    seconds = int((until - start).total_seconds())
    if seconds <= 0:
        return 0
    end = start + timedelta(seconds=seconds)
    advanced = Job.objects.filter(pk=job.pk, last_charged_at=job.last_charged_at).update(
        last_charged_at=end
    )
    if advanced != 1:  # another worker charged this interval first
        return 0
    ledger.charge_usage(
        job.project, job.pk, job.owner, _gpu_type(job, known_types), start, end, job.gpus * seconds
    )
    job.last_charged_at = end
    return job.gpus * seconds


@transaction.atomic
def charge_running_jobs(now: datetime | None = None) -> int:
    """Charge every running funded job up to ``now``, but never past the moment its cluster's
    backend last said what runs (``last_sync_at``): a job may have ended since, unnoticed while
    a worker was down or a sync lagged, and it is charged to its real end when the end is
    noticed (reconcile), never beyond. The ledger is append-only: what is charged too far
    cannot be taken back. A cluster never synced (a fresh one, unit tests) charges to ``now``.
    Returns GPU-seconds charged."""
    now = now or timezone.now()
    total = 0
    jobs = (
        Job.objects.select_for_update(of=("self",))
        .filter(state=Job.State.RUNNING, funded=True)
        .select_related("project", "owner", "cluster")
    )
    known_types: dict = {}  # one GpuType query per type, not per job
    for job in jobs:
        seen = job.cluster.last_sync_at
        total += _charge_until(job, min(now, seen) if seen else now, known_types)
        fault_point("charge.job")
    return total


def close_run(job: Job, now: datetime) -> None:
    """A run ends (finish, preemption, cancel): charge to ``now``, keep progress, drop the lien."""
    from budgets import ledger

    _charge_until(job, now)
    if job.funded:
        ledger.release_lien(job.pk)
    if job.started_at:
        ran = max(0, int((now - job.started_at).total_seconds()))
        job.run_seconds_done = job.run_seconds_done + ran if job.resumable else 0
        Job.objects.filter(pk=job.pk).update(run_seconds_done=job.run_seconds_done)
