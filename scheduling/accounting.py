"""GPU-hour accounting for running jobs: liens at start, charges per interval, release at end.

Only funded occupancy is charged; unfunded work is free. Charging is idempotent per job ×
interval: the ledger's (job_ref, interval_start) is unique and a job's ``last_charged_at``
advances with a conditional UPDATE in the same transaction, so a retried or concurrent charge
records each second once.

What is charged, from when to when (docs/budgets.md says it for users):

1. from the start the backend confirms (or the pass's decision until it does) to the run's
   real end — the backend's end time when it reports one, even if Allot learns it late;
2. at the price of the nodes the run occupies (``pricing``);
3. during protection the lien pays; after it, only while the project and every ancestor
   still have a balance (the floor): charging stops where the balance reaches zero, and the
   next pass makes the run unallocated from that moment (``defund``).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from core.faults import fault_point
from core.logs import event
from scheduling import liens, pricing
from scheduling.charge_floor import Floor, periods_of
from scheduling.models import Job, JobEvent

log = logging.getLogger(__name__)


def _charge_until(
    job: Job, until: datetime, known: dict | None = None, floor: Floor | None = None
) -> int:
    """Charge [last_charged_at, until) for one job, within the floor, one ledger row per
    budget period it spans; return GPU-seconds."""
    start = job.last_charged_at or job.started_at
    if not job.funded or job.project_id is None or start is None or until <= start:
        return 0
    floor = floor or Floor()
    total = 0
    for part_start, part_end in periods_of(start, until):
        charged = _charge_part(job, part_start, part_end, known, floor)
        total += charged
        if job.last_charged_at != part_end:  # the floor stopped it in this period
            break
    return total


def _charge_part(job: Job, start: datetime, until: datetime, known, floor: Floor) -> int:
    from budgets import ledger

    until = floor.cap(job, start, until, known)
    seconds = int((until - start).total_seconds())
    if seconds <= 0:
        return 0
    end = start + timedelta(seconds=seconds)
    advanced = Job.objects.filter(pk=job.pk, last_charged_at=job.last_charged_at).update(
        last_charged_at=end
    )
    if advanced != 1:  # another worker charged this interval first
        return 0
    entry, _ = ledger.charge_usage(
        job.project,
        job.pk,
        job.owner,
        pricing.gpu_type_row(job, known),
        start,
        end,
        job.gpus * seconds,
    )
    floor.spend(job, entry.cost_gpu_seconds, start, end)
    job.last_charged_at = end
    return job.gpus * seconds


# What a charging run reads of each running job (not its explanation, command, ...).
CHARGE_READS = (
    "owner_id",
    "gpus",
    "funded",
    "started_at",
    "last_charged_at",
    "protected_until",
    "nodes",
    "project__path",
    "project__depth",
    "cluster__last_sync_at",
    "cluster__gpu_type",
    "last_error",
)


@transaction.atomic
def charge_running_jobs(now: datetime | None = None) -> int:
    """Charge every running funded job up to ``now``, but never past the moment its cluster's
    backend last said what runs (``last_sync_at``): a job may have ended since, unnoticed while
    a worker was down or a sync lagged, and it is charged to its real end when the end is
    noticed (reconcile), never beyond. The ledger is append-only: what is charged too far
    cannot be taken back. A cluster never synced (a fresh one, unit tests) charges to ``now``.
    Returns GPU-seconds charged.

    Each job is charged exactly as ``_charge_until`` charges one (the same interval, floor,
    price and rounding, in job order so the floor is spent in the same order), but written
    for all of them at once: a constant number of statements whatever the number of jobs
    (5,000 running jobs in one run of `bench_live`), where one job at a time took about eight each.
    """
    now = now or timezone.now()
    _lock_budget_chains()
    jobs = list(
        Job.objects.select_for_update(of=("self",))
        .filter(state=Job.State.RUNNING, funded=True)
        .select_related("project", "cluster")  # the owner is written by id
        .only(*CHARGE_READS)
        .order_by("pk")
    )
    due = []
    for job in jobs:
        seen = job.cluster.last_sync_at  # charge no further than the backend last confirmed
        until = min(now, seen) if seen else now
        start = job.last_charged_at or job.started_at
        if job.project_id is not None and start is not None and until > start:
            due.append((job, start, until))
    if not due:
        event(log, "charge", jobs=len(jobs), gpu_seconds=0)
        return 0
    fault_point("charge.job")
    known = pricing.known_places(*{job.cluster_id for job, _, _ in due})
    existing = _existing_charges(
        [(job.pk, a) for job, start, until in due for a, _ in periods_of(start, until)]
    )
    floor = Floor()
    planned = []  # (job, start, end, gpu-seconds, GpuType row, cost, already charged)
    unpriced = []
    for job, start, until in due:
        try:
            planned += _plan(job, start, until, known, existing, floor)
        except pricing.UnpricedGpuType as exc:  # this job's alone: the others are charged
            unpriced.append((job, exc))
    total = _write_charges(planned)
    _note_unpriced(unpriced, now)
    skipped = {job.pk for job, _ in unpriced}
    _defund_past_periods([d for d in due if d[0].pk not in skipped], now)
    event(log, "charge", jobs=len(jobs), gpu_seconds=total, unpriced=len(unpriced))
    return total


def _lock_budget_chains() -> None:
    """Lock the budget chains of every running funded job, top first in path order, as a pass
    holding liens does (``ledger.hold_liens``), before the balances are read: a pass
    spending the last hours of a chain then commits first and the floor sees its lien, or
    waits for this run and sees its charges. Taken before the job rows, as the pass takes the
    chain before it locks jobs to preempt or defund them, so the two never wait on each
    other crosswise. NO KEY, as there: the charges' foreign-key checks must not wait."""
    from django.db.models import Exists, OuterRef

    from budgets.models import BudgetNode

    # One statement: a node is on a chain when a running funded job's project path starts
    # with its path (treebeard's materialised path).
    funding = Job.objects.filter(
        state=Job.State.RUNNING, funded=True, project__path__startswith=OuterRef("path")
    )
    list(
        BudgetNode.objects.select_for_update(no_key=True)
        .filter(Exists(funding))
        .order_by("path")
        .values_list("pk", flat=True)
    )


def _plan(job: Job, start: datetime, until: datetime, known, existing, floor: Floor) -> list:
    """The charges of one job for [start, until): one per budget period it spans, each
    capped by that period's floor; none after the floor stops it. Raises UnpricedGpuType
    before anything is spent from the floor."""
    gpu_type = pricing.gpu_type_row(job, known)
    planned = []
    for part_start, part_end in periods_of(start, until):
        capped = floor.cap(job, part_start, part_end, known)
        seconds = int((capped - part_start).total_seconds())
        if seconds <= 0:
            break
        end = part_start + timedelta(seconds=seconds)
        entry = existing.get((job.pk, part_start))
        cost = entry.cost_gpu_seconds if entry else ledger_cost(job.gpus * seconds, gpu_type)
        floor.spend(job, cost, part_start, end)
        planned.append(
            (job, part_start, end, job.gpus * seconds, gpu_type, cost, entry is not None)
        )
        if end < part_end:
            break
    return planned


def _defund_past_periods(due: list, now: datetime) -> None:
    """A run whose charges stopped at the floor of a period that has ended since ran out of
    that period's money there: the new period's grant does not pay for the old period's
    hours, and nothing later may be charged before them. It is unallocated from that moment
    (``defund``), as the next pass would make it had the period not ended meanwhile."""
    from budgets.periods import BudgetPeriod

    current = BudgetPeriod.current(now)
    for job, _, until in due:
        stopped = job.last_charged_at or job.started_at
        if stopped is None or stopped >= until or not job.funded:
            continue
        period = BudgetPeriod.current(stopped)
        if period == current:
            continue  # the pass's own floor decides, on the current balance
        defund(job, now, f"{job.project.slug_path} in {period.label}")


def _note_unpriced(unpriced: list, now: datetime) -> None:
    """A job whose nodes' GPU type has no price (rediscovery relabelled them) is not charged
    until an operator prices it; it is then charged from where it stopped, nothing lost. Its
    row and timeline say why, once per cause."""
    for job, exc in unpriced:
        message = f"not charged since {job.last_charged_at or job.started_at:%Y-%m-%d %H:%M:%S}"
        message += f" UTC: {exc.args[0]}"
        if job.last_error.startswith("not charged since") and exc.name in job.last_error:
            continue
        Job.objects.filter(pk=job.pk).update(last_error=message)
        JobEvent.objects.create(job=job, at=now, kind="charge_failed", message=message)
        log.warning("charge skipped job=%s: %s", job.pk, exc.args[0])


def ledger_cost(gpu_seconds: int, gpu_type) -> int:
    from budgets.ledger import cost_of

    return cost_of(gpu_seconds, gpu_type)


def _existing_charges(keys: list[tuple[int, datetime]]) -> dict:
    """Charges already recorded for these (job, interval start) pairs (a retried run): one
    query. ``ledger.charge_usage`` returns such a charge unchanged instead of a new one."""
    from budgets.models import UsageEntry

    wanted = set(keys)
    rows = UsageEntry.objects.filter(
        job_ref__in={ref for ref, _ in keys},
        interval_start__in={start for _, start in keys},
        reverses__isnull=True,
    )
    return {
        (r.job_ref, r.interval_start): r for r in rows if (r.job_ref, r.interval_start) in wanted
    }


def _write_charges(planned: list) -> int:
    """Advance every job's ``last_charged_at`` (one conditional UPDATE: only where it still
    holds what was read), insert the new ledger rows (one INSERT) and shrink the open liens
    by what was charged (one UPDATE). Returns GPU-seconds charged."""
    from budgets.models import Lien, UsageEntry
    from core.bulk_sql import insert_many, update_many

    if not planned:
        return 0
    ends = {job.pk: (job, end) for job, _, end, *_ in planned}  # a job's last part ends it
    rows = [(pk, end, job.last_charged_at) for pk, (job, end) in ends.items()]
    advanced = update_many(Job, "pk", ["last_charged_at"], rows, unchanged=["last_charged_at"])
    if advanced != len(rows):  # another worker charged some of them first: skip those
        now_at = dict(
            Job.objects.filter(pk__in=[row[0] for row in rows]).values_list("pk", "last_charged_at")
        )
        planned = [p for p in planned if now_at.get(p[0].pk) == ends[p[0].pk][1]]
    recorded = timezone.now()
    insert_many(
        UsageEntry,
        [
            "node_id",
            "job_ref",
            "user_id",
            "gpu_type_id",
            "interval_start",
            "interval_end",
            "gpu_seconds",
            "cost_gpu_seconds",
            "recorded_at",
        ],
        [
            (job.project_id, job.pk, job.owner_id, gpu_type.pk, start, end, gpu_s, cost, recorded)
            for job, start, end, gpu_s, gpu_type, cost, known in planned
            if not known
        ],
    )
    update_many(
        Lien,
        "job_ref",
        [],
        list(_lien_costs(planned).items()),
        add=["charged_gpu_seconds"],
        where={"released_at": None},
    )
    for job, _, end, *_ in planned:
        job.last_charged_at = end
    return sum(p[3] for p in planned)


def _lien_costs(planned: list) -> dict[int, int]:
    """What each job's new charges cost, summed over its parts (one UPDATE row per lien)."""
    costs: dict[int, int] = {}
    for job, _, _, _, _, cost, known in planned:
        if not known:
            costs[job.pk] = costs.get(job.pk, 0) + cost
    return costs


def close_run(job: Job, now: datetime) -> None:
    """A run ends (finish, preemption, cancel) at ``now``: charge to it, keep progress, drop
    the lien. The caller holds the job row (``select_for_update``) so no charge interleaves.

    ``now`` may be earlier than what was already charged: a job that ended during a backend
    outage was charged provisionally until the backend answered again. What lies beyond the
    real end is given back by reversal rows, in the caller's transaction (the one that closes
    the job), so the ledger never shows the closed job overcharged.
    """
    from budgets import ledger

    priced = _charge_priced(job, now)
    if priced and job.funded and job.last_charged_at is not None and job.last_charged_at < now:
        # The floor stopped its charges before the end: its funding ran out there.
        Job.objects.filter(pk=job.pk).update(funding_ended_at=job.last_charged_at)
        job.funding_ended_at = job.last_charged_at
    if job.last_charged_at is not None and job.last_charged_at > now:
        ledger.reverse_usage_after(job.pk, now, job.gpus)
        Job.objects.filter(pk=job.pk).update(last_charged_at=now)
        job.last_charged_at = now
    if job.funded:
        ledger.release_lien(job.pk)
    if job.started_at:
        ran = max(0, int((now - job.started_at).total_seconds()))
        job.run_seconds_done = job.run_seconds_done + ran if job.resumable else 0
        Job.objects.filter(pk=job.pk).update(run_seconds_done=job.run_seconds_done)


def _charge_priced(job: Job, now: datetime) -> bool:
    """``_charge_until`` for a run being closed or defunded; False, with the cause recorded
    on the job, when its nodes' GPU type has no price: closing it must not fail for that (a
    cancel, a preemption, a whole pass), and the span it was not charged for stays free."""
    try:
        _charge_until(job, now)
    except pricing.UnpricedGpuType as exc:
        _note_unpriced([(job, exc)], now)
        return False
    return True


def defund(job: Job, now: datetime, path: str) -> None:
    """The engine's budget floor: the run is unallocated from where its charges stopped (the
    moment the balance reached zero, at most ``now``). The caller holds the job row."""
    from budgets import ledger

    _charge_priced(job, now)
    ended = min(job.last_charged_at or now, now)
    ledger.release_lien(job.pk)
    Job.objects.filter(pk=job.pk).update(
        funded=False, funding_ended_at=ended, protection_source="none (funding ran out)"
    )
    job.funded, job.funding_ended_at = False, ended
    JobEvent.objects.create(
        job=job,
        at=ended,
        kind="unfunded",
        message=f"funding ran out at {ended:%Y-%m-%d %H:%M:%S} UTC ({path} has no balance "
        "left); it runs unallocated and any job may preempt it",
    )


def confirm_start(job: Job, started: datetime) -> None:
    """The backend reports when the attempt really started (later than the pass decided):
    protection and charges count from then, and the lien holds no more than the protection
    still needs from there. The caller holds the job row.

    When everything charged so far lies before the real start, it is all given back. When
    some of it lies after, every charge of the attempt is given back and the span from the
    real start charged again, as new charges on the real start's grid: a charge the real
    start falls into cannot keep a partial reversal (trimmed to whole seconds it would leave
    the run up to a second per GPU short, and a charge takes one reversal only, so a real end
    learnt later could not give its tail back). A charge that begins exactly at the real start
    straddles nothing: it and those after it stand, and only those before it go back."""
    from budgets import ledger

    if job.started_at is None or started - job.started_at < timedelta(seconds=1):
        return  # the same start (the dispatch's own delay is not worth a ledger row)
    delta = started - job.started_at
    charged_to = job.last_charged_at
    # Charged while funded: a job defunded since keeps the charges it had (to its funding's
    # end), and those before the real start go back too.
    charged = charged_to is not None and charged_to > job.started_at
    # A charge that straddles the real start would keep a partial reversal, and a charge has
    # room for one reversal only: when the real end is learnt later too (a job that ran
    # briefly), its tail beyond the end could not be given back. So whenever something was
    # charged past the real start, every charge is given back and the span charged again.
    # Unless a charge begins exactly at the real start (charging ran to the moment the start
    # was sent, which is then the real one): none straddles it, those before it go back whole
    # and the rest stand; a new charge from there would be that charge again, recorded once.
    regrid = (
        charged
        and job.funded
        and (delta % timedelta(seconds=1) != timedelta(0) or charged_to > started)
        and not _a_charge_begins_at(job, started)
    )
    if regrid:
        ledger.reverse_usage_since(job.pk, job.started_at)
    elif charged:
        ledger.reverse_usage_before(job.pk, started, job.gpus, since=job.started_at)
    fields = {
        "started_at": started,
        "last_charged_at": started if regrid else max(charged_to or started, started),
        "protected_until": job.protected_until + delta if job.protected_until else None,
    }
    if job.funding_ended_at is not None and job.funding_ended_at < started:
        fields["funding_ended_at"] = started  # its funding ran out before it really started
    Job.objects.filter(pk=job.pk).update(**fields)
    for name, value in fields.items():
        setattr(job, name, value)
    if regrid and charged_to > started:
        _charge_until(job, charged_to)  # what was charged after the real start, on its grid
    if job.funded and job.protected_until is not None:
        # The lien holds what the protection still needs from the real start: what was held
        # for seconds now given back (an extension that ended while the start was unknown)
        # goes back to the budget.
        liens.shrink_protection_lien(job, job.protected_until)


def _a_charge_begins_at(job: Job, at: datetime) -> bool:
    """Whether one of this attempt's charges (not a reversal) begins at ``at``."""
    from budgets.models import UsageEntry

    return UsageEntry.objects.filter(
        job_ref=job.pk, interval_start=at, reverses__isnull=True
    ).exists()


# Settling an attempt Allot stopped after its work had ended lives in scheduling.settling;
# these names stay importable from here.
from scheduling.settling import settle_earlier_attempt, settle_late_end  # noqa: E402, F401
