"""Charging the usage ledger and holding liens: what the scheduler calls.

The ledger is append-only and idempotent per (job, interval), so a charging task can run
twice, or crash half-way and be retried, without charging anyone twice. These services write
no AuditEntry: the ledger row (job, user, interval, amount) is itself the record.
"""

from decimal import ROUND_HALF_UP, Decimal

from django.db import IntegrityError, transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from budgets.balances import chain_paths, remaining_of
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
        existing = UsageEntry.objects.filter(
            job_ref=job_ref, interval_start=interval_start, reverses__isnull=True
        ).first()
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
        return UsageEntry.objects.get(
            job_ref=job_ref, interval_start=interval_start, reverses__isnull=True
        ), False
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
    # Lock the whole chain, top first (one order for every caller, so no deadlock): spending
    # counts against every ancestor, and two passes must not both spend its last hours.
    # NO KEY: usage rows being charged to these nodes (their foreign-key checks take KEY SHARE
    # at commit) must not wait for a lien, or a pass and a charge deadlock.
    chain = _locked_chain(node)
    node = chain[-1]
    lien = Lien.objects.select_for_update().filter(job_ref=job_ref).first()
    if lien is not None and lien.released_at is None:
        return lien
    if require_funds:
        _require_funds(chain, cost)
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


def _locked_chain(node) -> list[BudgetNode]:
    return list(
        BudgetNode.objects.select_for_update(no_key=True)
        .filter(path__in=chain_paths(node))
        .order_by("path")
    )


def _require_funds(chain, cost: int) -> None:
    """Every node of the (locked) chain must still cover ``cost``; else InsufficientFunds
    naming the first that cannot, what it has left and the shortfall."""
    for holder, remaining in zip(chain, remaining_of(chain), strict=True):
        if cost > remaining:
            raise InsufficientFunds(
                "cost_gpu_seconds",
                f"{holder.label} has {max(remaining, 0) / 3600:,.1f} GPU-hours left; "
                f"this needs {cost / 3600:,.1f} ({(cost - max(remaining, 0)) / 3600:,.1f} "
                "short).",
            )


@transaction.atomic
def extend_lien(node, job_ref, outstanding_gpu_seconds, *, now=None) -> Lien:
    """Make the job's lien hold ``outstanding_gpu_seconds`` still to be charged (its
    protection was extended while it runs): the lien grows by what it does not already hold,
    and, as at start, the project and every ancestor must cover that increase under a lock
    on the chain; otherwise InsufficientFunds and nothing is written. A lien that already
    holds as much is left as it is; a job without an open lien gets one (``hold_lien``)."""
    outstanding = int(outstanding_gpu_seconds)
    if outstanding < 0:
        raise BudgetValidationError("cost_gpu_seconds", "A lien cannot be negative.")
    chain = _locked_chain(node)
    lien = Lien.objects.select_for_update().filter(job_ref=job_ref).first()
    if lien is None or lien.released_at is not None:
        return hold_lien(node, job_ref, outstanding, now=now)
    held = max(lien.cost_gpu_seconds - lien.charged_gpu_seconds, 0)
    increase = outstanding - held
    if increase <= 0:
        return lien
    _require_funds(chain, increase)
    lien.cost_gpu_seconds = max(lien.cost_gpu_seconds, lien.charged_gpu_seconds) + increase
    lien.save(update_fields=["cost_gpu_seconds"])
    return lien


@transaction.atomic
def shrink_lien(job_ref, outstanding_gpu_seconds) -> int:
    """Make the job's open lien hold at most ``outstanding_gpu_seconds`` still to be charged
    (its protection was cut back: an extension ended or was shortened). Never below what is
    already charged against it; a lien that holds less is left as it is. Returns the
    cost-GPU-seconds given back to the budget (0 without an open lien)."""
    outstanding = int(outstanding_gpu_seconds)
    if outstanding < 0:
        raise BudgetValidationError("cost_gpu_seconds", "A lien cannot be negative.")
    lien = Lien.objects.select_for_update().filter(job_ref=job_ref, released_at=None).first()
    if lien is None:
        return 0
    cost = lien.charged_gpu_seconds + outstanding
    if cost >= lien.cost_gpu_seconds:
        return 0
    released = lien.cost_gpu_seconds - cost
    lien.cost_gpu_seconds = cost
    lien.save(update_fields=["cost_gpu_seconds"])
    return released


@transaction.atomic
def hold_liens(requests, *, now=None) -> set:
    """``hold_lien`` (with ``require_funds``) for many jobs, in the given order, as if one
    after another: what an earlier request holds is no longer there for a later one. Returns
    the job refs whose chain could not cover their cost; nothing is written for those.

    A scheduling pass holds the liens of all its funded starts at once: the union of their
    chains is locked in one statement (path order, the one order every caller uses), balances
    are read once and spent in memory, and new liens are inserted in one batch. A constant
    number of queries, where one ``hold_lien`` per start read the budget tree every time.
    """
    requests = [(node, job_ref, int(cost)) for node, job_ref, cost in requests]
    if not requests:
        return set()
    if any(cost < 0 for _, _, cost in requests):
        raise BudgetValidationError("cost_gpu_seconds", "A lien cannot be negative.")
    paths = sorted({p for node, _, _ in requests for p in chain_paths(node)})
    nodes = list(
        BudgetNode.objects.select_for_update(no_key=True).filter(path__in=paths).order_by("path")
    )
    by_path = {n.path: n for n in nodes}
    left = dict(zip((n.path for n in nodes), remaining_of(nodes), strict=True))
    liens = {
        lien.job_ref: lien
        for lien in Lien.objects.select_for_update().filter(
            job_ref__in=[ref for _, ref, _ in requests]
        )
    }
    now = now or timezone.now()
    failed, created, reopened = set(), [], []
    for node, job_ref, cost in requests:
        lien = liens.get(job_ref)
        if lien is not None and lien.released_at is None:
            continue  # already held (idempotent, as hold_lien)
        chain = chain_paths(node)
        if any(cost > left.get(path, 0) for path in chain):
            failed.add(job_ref)
            continue
        for path in chain:
            left[path] -= cost
        if lien is None:
            created.append(
                Lien(
                    node=by_path[chain[-1]], job_ref=job_ref, cost_gpu_seconds=cost, created_at=now
                )
            )
        else:
            lien.node, lien.cost_gpu_seconds, lien.charged_gpu_seconds = by_path[chain[-1]], cost, 0
            lien.created_at, lien.released_at = now, None
            reopened.append(lien)
    Lien.objects.bulk_create(created)
    Lien.objects.bulk_update(
        reopened, ["node", "cost_gpu_seconds", "charged_gpu_seconds", "created_at", "released_at"]
    )
    return failed


@transaction.atomic
def release_lien(job_ref, *, now=None) -> bool:
    """Release the job's open lien (the job ended or lost its protection). Safe to repeat."""
    return bool(
        Lien.objects.filter(job_ref=job_ref, released_at__isnull=True).update(
            released_at=now or timezone.now()
        )
    )


def _reverse(charge: UsageEntry, kept_gpu_s: int, *, lien: bool = True) -> int:
    """Write the reversal of what `charge` holds beyond `kept_gpu_s`; return the cost.
    ``lien=False`` when the charge belongs to an earlier attempt than the job's open lien."""
    excess_gpu_s = charge.gpu_seconds - kept_gpu_s
    excess_cost = charge.cost_gpu_seconds - cost_of(kept_gpu_s, charge.gpu_type)
    if excess_gpu_s <= 0 and excess_cost <= 0:
        return 0
    UsageEntry.objects.create(
        node_id=charge.node_id,
        job_ref=charge.job_ref,
        user_id=charge.user_id,
        gpu_type=charge.gpu_type,
        interval_start=charge.interval_start,
        interval_end=charge.interval_end,
        gpu_seconds=-excess_gpu_s,
        cost_gpu_seconds=-excess_cost,
        reverses=charge,
    )
    if not lien:
        return excess_cost
    # What the open lien counted as charged is given back too, so it holds again what the
    # protected window still needs.
    Lien.objects.filter(job_ref=charge.job_ref, released_at__isnull=True).update(
        charged_gpu_seconds=Greatest(F("charged_gpu_seconds") - excess_cost, Value(0))
    )
    return excess_cost


def _open_charges(job_ref):
    # A subquery, not a join on the reverse relation: PostgreSQL refuses FOR UPDATE on the
    # nullable side of an outer join.
    reversed_ids = UsageEntry.objects.filter(job_ref=job_ref, reverses__isnull=False).values(
        "reverses_id"
    )
    return (
        UsageEntry.objects.select_for_update(of=("self",))
        .filter(job_ref=job_ref, reverses__isnull=True)
        .exclude(pk__in=reversed_ids)
        .select_related("gpu_type")
        .order_by("interval_start")
    )


@transaction.atomic
def reverse_usage_after(job_ref, end, gpus: int) -> int:
    """Give back what job `job_ref` was charged beyond `end` (its real end, learnt late).

    Each charge reaching past `end` gets one reversal row for its excess: the charge's cost
    minus what the kept part would have cost, so the ledger then holds exactly what charging
    up to `end` would have written. Returns the cost-GPU-seconds given back. Repeating it
    changes nothing (a charge is reversed at most once).
    """
    returned = 0
    for charge in _open_charges(job_ref).filter(interval_end__gt=end):
        kept_s = max(0, int((end - charge.interval_start).total_seconds()))
        returned += _reverse(charge, min(charge.gpu_seconds, gpus * kept_s))
    return returned


@transaction.atomic
def reverse_usage_between(job_ref, end, before, gpus: int, *, since) -> int:
    """``reverse_usage_after`` for an earlier attempt of job `job_ref`, which ran from
    `since` and whose real end `end` is learnt after a newer attempt started at `before`:
    only charges that start in [since, before) are that attempt's. The job's open lien, if
    any, is the newer attempt's and keeps what it counted as charged. Returns the
    cost-GPU-seconds given back; repeating it changes nothing."""
    returned = 0
    charges = _open_charges(job_ref).filter(
        interval_start__gte=since, interval_start__lt=before, interval_end__gt=end
    )
    for charge in charges:
        kept_s = max(0, int((end - charge.interval_start).total_seconds()))
        returned += _reverse(charge, min(charge.gpu_seconds, gpus * kept_s), lien=False)
    return returned


@transaction.atomic
def reverse_usage_before(job_ref, start, gpus: int, *, since) -> int:
    """Give back what job `job_ref` was charged from `since` (the start the pass decided for
    this attempt) to `start` (when the backend really started it). Charges before `since`
    belong to earlier attempts, which ran and stay paid. Returns the cost-GPU-seconds given
    back."""
    returned = 0
    charges = _open_charges(job_ref).filter(interval_start__gte=since, interval_start__lt=start)
    for charge in charges:
        kept_s = max(
            0, int((charge.interval_end - max(start, charge.interval_start)).total_seconds())
        )
        returned += _reverse(charge, min(charge.gpu_seconds, gpus * kept_s))
    return returned


@transaction.atomic
def reverse_usage_since(job_ref, since) -> int:
    """Give back in full every charge of job `job_ref` from `since` (the start the pass
    decided for this attempt) on: the backend started the attempt off the grid they were
    charged on, and the caller charges the span again from the real start. Charges before
    `since` belong to earlier attempts and stay paid. Returns the cost-GPU-seconds given
    back."""
    return sum(
        _reverse(charge, 0) for charge in _open_charges(job_ref).filter(interval_start__gte=since)
    )
