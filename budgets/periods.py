"""Budget periods: calendar months or quarters (settings.ALLOT_BUDGET_PERIOD)."""

import datetime as dt
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone


@dataclass(frozen=True)
class BudgetPeriod:
    """A half-open period [start, end) of whole days in the project's time zone."""

    kind: str
    start: dt.date
    end: dt.date

    @classmethod
    def containing(cls, day: dt.date, kind: str | None = None) -> "BudgetPeriod":
        kind = kind or settings.ALLOT_BUDGET_PERIOD
        if kind == "month":
            start = day.replace(day=1)
            months = 1
        elif kind == "quarter":
            start = day.replace(month=(day.month - 1) // 3 * 3 + 1, day=1)
            months = 3
        else:
            raise ValueError(f"unknown budget period {kind!r}")
        month_index = start.month - 1 + months
        end = start.replace(year=start.year + month_index // 12, month=month_index % 12 + 1)
        return cls(kind, start, end)

    @classmethod
    def current(cls, now: dt.datetime | None = None) -> "BudgetPeriod":
        # The local date, not the UTC one: a quarter starts at local midnight.
        return cls.containing(timezone.localdate(now or timezone.now()))

    @property
    def start_at(self) -> dt.datetime:
        return _local_midnight(self.start)

    @property
    def end_at(self) -> dt.datetime:
        return _local_midnight(self.end)

    @property
    def hours(self) -> int:
        return (self.end - self.start).days * 24

    @property
    def label(self) -> str:
        if self.kind == "month":
            return self.start.strftime("%B %Y")
        return f"Q{(self.start.month - 1) // 3 + 1} {self.start.year}"

    def days(self) -> list[dt.date]:
        return [self.start + dt.timedelta(days=i) for i in range((self.end - self.start).days)]


def _local_midnight(day: dt.date) -> dt.datetime:
    return timezone.make_aware(dt.datetime.combine(day, dt.time.min))
