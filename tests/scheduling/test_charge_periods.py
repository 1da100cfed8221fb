"""The cut of a charge at period ends (``charge_floor.periods_of``), held to a plain model:
the parts tile the interval on the start's whole-second grid, and each lies in one period but
for the one second that may straddle an end. Times straddle the ends on purpose."""

import datetime as dt

from django.test import override_settings
from hypothesis import example, given, settings
from hypothesis import strategies as st

from budgets.periods import BudgetPeriod
from scheduling.charge_floor import periods_of

ENDS = [dt.datetime(2026, m, 1, tzinfo=dt.UTC) for m in (1, 4, 7, 10)] + [
    dt.datetime(2027, 1, 1, tzinfo=dt.UTC)
]


@settings(max_examples=200, deadline=None)
@given(
    end=st.sampled_from(ENDS),
    before=st.integers(min_value=0, max_value=200 * 86400),
    micros=st.integers(min_value=0, max_value=999_999),
    length=st.integers(min_value=1, max_value=200 * 86400),
    kind=st.sampled_from(["quarter", "month"]),
)
@example(end=ENDS[-1], before=7200, micros=0, length=3 * 3600, kind="quarter")
@example(end=ENDS[-1], before=0, micros=500_000, length=2, kind="quarter")
def test_parts_tile_the_charge_and_each_counts_in_one_period(end, before, micros, length, kind):
    start = end - dt.timedelta(seconds=before, microseconds=micros)
    until = start + dt.timedelta(seconds=length)
    with override_settings(ALLOT_BUDGET_PERIOD=kind):
        parts = list(periods_of(start, until))
        periods = [BudgetPeriod.current(a) for a, _ in parts]
    assert parts[0][0] == start and parts[-1][1] == until
    assert all(a < b for a, b in parts)
    assert all(parts[i][1] == parts[i + 1][0] for i in range(len(parts) - 1))
    for a, b in parts[:-1]:
        assert (b - a) % dt.timedelta(seconds=1) == dt.timedelta(0)  # whole seconds
    for (_, b), period in zip(parts, periods, strict=True):
        assert b <= period.end_at + dt.timedelta(seconds=1)
