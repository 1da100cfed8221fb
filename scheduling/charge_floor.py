"""The charging floor: balances along each job's budget chain, per budget period, spent in
memory as a charging run charges (``scheduling.accounting``), and the cut of a charge at
each period's end it spans (docs/budgets.md, "Period boundaries")."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from scheduling import pricing
from scheduling.models import Job


class Floor:
    """Balances along each job's budget chain, read once per charging run and period (three
    queries each) and spent in memory as the run charges, so no budget is charged below
    zero. Each part of a charge is capped by the balance of the period it lies in
    (``periods_of``): a period's end in the middle of a charge never lets the new period's
    grant pay for the old period's hours."""

    def __init__(self):
        self.left: dict = {}

    def _chain(self, job: Job) -> list[str]:
        from budgets.balances import chain_paths

        return chain_paths(job.project)

    def _left(self, at: datetime) -> dict[str, int]:
        from budgets.balances import remaining_by_path
        from budgets.periods import BudgetPeriod

        period = BudgetPeriod.current(at)
        if period.start not in self.left:
            # Open liens spend the current period's balance only (as a grant cut counts
            # them): a past period's part is capped by what was granted and charged there.
            current = period == BudgetPeriod.current()
            self.left[period.start] = remaining_by_path(period, with_liens=current)
        return self.left[period.start]

    def cap(self, job: Job, start: datetime, end: datetime, known: dict | None) -> datetime:
        """How far [start, end) (within one period) may be charged: the protected part in
        full (the lien pays), the rest while every node on the chain has a balance."""
        free_from = max(start, job.protected_until or start)
        if end <= free_from:
            return end
        left = self._left(start)
        avail = min(left.get(p, 0) for p in self._chain(job))
        return min(
            end, free_from + timedelta(seconds=pricing.affordable_seconds(job, avail, known))
        )

    def spend(self, job: Job, cost: int, start: datetime, end: datetime) -> None:
        if job.protected_until is None or end <= job.protected_until:
            return
        left = self._left(start)
        part = (end - max(start, job.protected_until)) / (end - start) if end > start else 0
        for path in self._chain(job):
            if path in left:
                left[path] -= int(cost * part)


def periods_of(start: datetime, until: datetime):
    """[start, until) cut where a budget period ends, each part in whole seconds from
    ``start`` (the first second that straddles the end counts in the old period)."""
    from budgets.periods import BudgetPeriod

    while start < until:
        boundary = BudgetPeriod.current(start).end_at
        if boundary >= until:
            yield start, until
            return
        end = start + timedelta(seconds=math.ceil((boundary - start).total_seconds()))
        yield start, min(end, until)
        start = min(end, until)
