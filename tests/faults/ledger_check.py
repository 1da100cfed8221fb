"""The ledger invariant of the fault suite: per run, funded occupancy x cost, to the second.

A run's charges start where Allot says the run started: the pass that decided it (its
'running' event), or — when the backend reports that the attempt really started at least a
second later — that later moment (scheduling.accounting.confirm_start moves ``started_at`` there,
gives back what was charged before it, and when the move is not whole seconds charges the rest
again on the real start's grid, so every run is charged exactly from its start). A charge
reaching past a run's real end, learnt late, is cut back by a reversal row
(budgets.ledger.reverse_usage_after). So the check works on net charges: each charge together
with its reversal.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

SECOND = timedelta(seconds=1)


def cost(gpu_seconds: int, factor: Decimal) -> int:
    return int((Decimal(gpu_seconds) * factor).to_integral_value(ROUND_HALF_UP))


@dataclass
class Charge:
    """One charge row with its reversal netted in."""

    pk: int
    start: datetime
    end: datetime
    gpu_s: int
    cost: int
    reversed: bool = False


def net_charges(entries, factor: Decimal) -> tuple[list[Charge], list[str]]:
    """Charges of one job (by interval start), each netted with its reversal; and what is
    wrong with the rows themselves (a cost that is not GPU-seconds x the factor, a reversal of
    nothing, a charge reversed twice)."""
    problems = []
    charges = {
        e.pk: Charge(e.pk, e.interval_start, e.interval_end, e.gpu_seconds, e.cost_gpu_seconds)
        for e in entries
        if e.reverses_id is None
    }
    for e in entries:
        if e.reverses_id is None:
            if e.cost_gpu_seconds != cost(e.gpu_seconds, factor):
                problems.append(
                    f"entry {e.pk} costs {e.cost_gpu_seconds} for {e.gpu_seconds} GPU-s"
                )
            continue
        charge = charges.get(e.reverses_id)
        if charge is None or charge.reversed:
            problems.append(f"reversal {e.pk} of entry {e.reverses_id}: no such open charge")
            continue
        if (e.interval_start, e.interval_end) != (charge.start, charge.end):
            problems.append(f"reversal {e.pk} covers another interval than entry {charge.pk}")
        charge.gpu_s += e.gpu_seconds
        charge.cost += e.cost_gpu_seconds
        charge.reversed = True
    for charge in charges.values():
        if charge.gpu_s < 0 or charge.cost != cost(charge.gpu_s, factor):
            problems.append(f"entry {charge.pk} nets {charge.gpu_s} GPU-s costing {charge.cost}")
    return sorted(charges.values(), key=lambda c: (c.start, c.pk)), problems


def tile(charges: list[Charge], start: datetime, end: datetime, gpus: int) -> tuple[int, list]:
    """Check that the net charges of one funded run cover [start, end) without a gap or an
    overlap, each for whole seconds of its part of the run; returns (GPU-s charged, problems).

    A charge reversed in part (its end came after the run's) holds the whole seconds of the
    part it kept: its interval is clipped to the run. Past the last charge less than a second
    may be left, never charged (charges are whole seconds, counted from the run's start)."""
    problems, cursor, total = [], start, 0
    for charge in (c for c in charges if c.gpu_s):
        low, high = max(charge.start, start), min(charge.end, end)
        if low != cursor:
            problems.append(f"ledger gap/overlap at {low:%H:%M:%S.%f} (not {cursor:%H:%M:%S.%f})")
        if high <= low:
            problems.append(f"entry {charge.pk} charges {charge.gpu_s} GPU-s outside the run")
            continue
        want = gpus * int((high - low).total_seconds())
        if charge.gpu_s != want:
            problems.append(f"entry {charge.pk} nets {charge.gpu_s} GPU-s for {want} GPU-s of run")
        cursor, total = high, total + charge.gpu_s
    if end - cursor >= SECOND:
        problems.append(f"{(end - cursor).total_seconds():.1f} s at the end never charged")
    return total, problems


def check_run(charges: list[Charge], starts: list[datetime], end: datetime, gpus: int,
              funded: bool) -> tuple[datetime, int, int, list[str]]:  # fmt: skip
    """The first of ``starts`` (the moments the run may have been charged from: the pass's,
    or the backend's real start) that the net charges fit exactly; returns (that start, GPU-s
    charged, occupancy, problems). Exactly: the whole seconds of [start, end), per GPU."""
    if not funded:
        charged = sum(c.gpu_s for c in charges)
        return starts[0], charged, 0, [] if charged == 0 else [f"{charged} GPU-s charged unfunded"]
    found = None
    for start in starts:
        total, problems = tile(charges, start, end, gpus)
        occupancy = gpus * int((end - start).total_seconds())
        if total != occupancy:
            problems.append(f"charged {total} GPU-s, occupancy is {occupancy}")
        if not problems:
            return start, total, occupancy, []
        found = found or (start, total, occupancy, problems)
    return found
