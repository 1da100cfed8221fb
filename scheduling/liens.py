"""Liens: the GPU-hours a funded run's protected window will cost, held on its budget chain
from its start (``hold_start_liens``) and moved when an exception extends or ends its
protection. The ledger (``budgets.ledger``) keeps them; ``scheduling.accounting`` charges
against them as the run goes."""

from __future__ import annotations

from datetime import datetime

from scheduling import pricing
from scheduling.models import Job


def protected_window_cost(job: Job, protected_s: int) -> int:
    """The lien for a protected window: the same price the ledger will charge for it."""
    return pricing.cost_gpu_seconds(job, protected_s)


def extend_protection_lien(job: Job, protected_until: datetime) -> None:
    """A running funded job's protection now lasts to ``protected_until``: its lien must hold
    every protected second not yet charged, at the price of its nodes (a protected run is
    charged in full, so only the lien keeps its budget above zero). Raises InsufficientFunds
    (naming the budget and the shortfall) when the project or an ancestor cannot cover the
    increase; nothing is written then. The caller holds the job row."""
    from budgets import ledger

    charged_to = max(job.last_charged_at or job.started_at, job.started_at)
    seconds = max(0, int((protected_until - charged_to).total_seconds()))
    ledger.extend_lien(job.project, job.pk, pricing.cost_gpu_seconds(job, seconds))


def shrink_protection_lien(job: Job, protected_until: datetime) -> int:
    """A running funded job's protection now ends earlier, at ``protected_until`` (an
    extension ended): its lien holds no more than the protected seconds not yet charged, at
    the price of its nodes, and never less than what is charged against it. The caller holds
    the job row. Returns the cost-GPU-seconds given back to the budget."""
    from budgets import ledger

    charged_to = max(job.last_charged_at or job.started_at, job.started_at)
    seconds = max(0, int((protected_until - charged_to).total_seconds()))
    return ledger.shrink_lien(job.pk, pricing.cost_gpu_seconds(job, seconds))


def hold_start_liens(starts: list[tuple[Job, int]]) -> set[int]:
    """``hold_start_lien`` for all of a pass's funded starts (job, protected seconds), in
    decision order, in a constant number of queries. Returns the ids of the jobs whose lien
    failed (no project, a balance no longer covers it, or the nodes it lands on lost their
    price meanwhile: one start's, never the pass's failure); nothing is written for those."""
    from budgets import ledger

    if not starts:
        return set()
    failed, requests = set(), []
    known = pricing.known_places(*{job.cluster_id for job, _ in starts})
    for job, protected_s in starts:
        if job.project_id is None:
            failed.add(job.pk)
        else:
            try:
                cost = pricing.cost_gpu_seconds(job, protected_s, known)
            except pricing.UnpricedGpuType as exc:  # relabelled while the pass decided
                failed.add(job.pk)
                job.unpriced = exc.args[0]  # for the pending message (apply._not_started)
                continue
            requests.append((job.project, job.pk, cost))
    return failed | (ledger.hold_liens(requests) if requests else set())
