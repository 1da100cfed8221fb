"""Charging the usage ledger and holding liens: what the scheduler calls.

The ledger is append-only and idempotent per (job, interval), so a charging task can run
twice, or crash half-way and be retried, without charging anyone twice. These services write
no AuditEntry: the ledger row (job, user, interval, amount) is itself the record.
"""

from decimal import ROUND_HALF_UP, Decimal

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from budgets.balances import remaining_cost_seconds
from budgets.errors import BudgetValidationError, InsufficientFunds
from budgets.models import BudgetNode, GpuType, Lien, UsageEntry


def cost_of(gpu_seconds: int, gpu_type: GpuType) -> int:
    """Cost-normalised GPU-seconds: a B200 second costs `cost_factor` H100 seconds."""
    return int(
        (Decimal(gpu_seconds) * Decimal(str(gpu_type.cost_factor))).to_integral_value(ROUND_HALF_UP)
    )


def _gpu_type(gpu_type) -> GpuType:
    if isinstance(gpu_type, GpuType):
        return gpu_type
    try:
        return GpuType.objects.get(name=gpu_type)
    except GpuType.DoesNotExist:
        raise BudgetValidationError("gpu_type", f"Unknown GPU type {gpu_type!r}.") from None


@transaction.atomic
def charge_usage(
    node, job_ref, user, gpu_type, interval_start, interval_end, gpu_seconds
) -> tuple[UsageEntry, bool]:
    """Record one interval of a job's GPU use; returns (entry, created).

    Charging the same (job_ref, interval_start) again returns the first entry unchanged.
    The job's open lien shrinks by the same cost, so held + used never counts a second twice.
    """
    gpu_type = _gpu_type(gpu_type)
    if int(gpu_seconds) < 0:
        raise BudgetValidationError("gpu_seconds", "GPU-seconds cannot be negative.")
    if interval_end < interval_start:
        raise BudgetValidationError("interval_end", "The interval ends before it starts.")
    if job_ref is not None:
        existing = UsageEntry.objects.filter(job_ref=job_ref, interval_start=interval_start).first()
        if existing is not None:
            return existing, False
    cost = cost_of(int(gpu_seconds), gpu_type)
    try:
        with transaction.atomic():
            entry = UsageEntry.objects.create(
                node=node,
                job_ref=job_ref,
                user=user,
                gpu_type=gpu_type,
                interval_start=interval_start,
                interval_end=interval_end,
                gpu_seconds=int(gpu_seconds),
                cost_gpu_seconds=cost,
            )
    except IntegrityError:  # a concurrent charger recorded it first
        return UsageEntry.objects.get(job_ref=job_ref, interval_start=interval_start), False
    if job_ref is not None:
        Lien.objects.filter(job_ref=job_ref, released_at__isnull=True).update(
            charged_gpu_seconds=F("charged_gpu_seconds") + cost
        )
    return entry, True


@transaction.atomic
def hold_lien(node, job_ref, cost_gpu_seconds, *, require_funds=True, now=None) -> Lien:
    """Set aside `cost_gpu_seconds` of `node`'s balance for job `job_ref`.

    Idempotent: an open lien for the job is returned as it is. A released one is reopened
    for the new start (a resumed job is protected, and funded, again). With `require_funds`
    the node's remaining balance must cover the amount, checked under a lock on the node so
    two passes cannot both spend the last hours; otherwise InsufficientFunds.
    """
    cost = int(cost_gpu_seconds)
    if cost < 0:
        raise BudgetValidationError("cost_gpu_seconds", "A lien cannot be negative.")
    # NO KEY: usage rows being charged to this node (their foreign-key checks take KEY SHARE
    # at commit) must not wait for a lien, or a pass and a charge deadlock.
    node = BudgetNode.objects.select_for_update(no_key=True).get(pk=node.pk)
    lien = Lien.objects.select_for_update().filter(job_ref=job_ref).first()
    if lien is not None and lien.released_at is None:
        return lien
    if require_funds:
        remaining = remaining_cost_seconds(node)
        if cost > remaining:
            raise InsufficientFunds(
                "cost_gpu_seconds",
                f"{node.label} has {max(remaining, 0) / 3600:,.1f} GPU-hours left; "
                f"this needs {cost / 3600:,.1f}.",
            )
    now = now or timezone.now()
    if lien is None:
        return Lien.objects.create(
            node=node, job_ref=job_ref, cost_gpu_seconds=cost, created_at=now
        )
    lien.node, lien.cost_gpu_seconds, lien.charged_gpu_seconds = node, cost, 0
    lien.created_at, lien.released_at = now, None
    lien.save(
        update_fields=[
            "node",
            "cost_gpu_seconds",
            "charged_gpu_seconds",
            "created_at",
            "released_at",
        ]
    )
    return lien


@transaction.atomic
def release_lien(job_ref, *, now=None) -> bool:
    """Release the job's open lien (the job ended or lost its protection). Safe to repeat."""
    return bool(
        Lien.objects.filter(job_ref=job_ref, released_at__isnull=True).update(
            released_at=now or timezone.now()
        )
    )
