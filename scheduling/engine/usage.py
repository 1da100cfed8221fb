"""Windowed usage, for the simulator (the live loop reads its windows from the ledger).

Two shapes of "usage over the last window", chosen by a setting:

* ``HardWindowUsage`` counts exactly what was charged in the last ``window_s`` seconds. Charges
  land in buckets (one hour by default) so expiring old usage costs O(buckets), not O(charges).
* ``DecayedUsage`` halves every ``half_life_s`` (Slurm's PriorityDecayHalfLife): recent usage
  weighs most and nothing falls off a cliff.

Both accept ``charge(key, start_s, end_s, rate)`` (rate in cost-normalised GPUs) and answer
``value(key, now_s)``. Charges must arrive in non-decreasing ``end_s`` order per key.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque


class HardWindowUsage:
    def __init__(self, window_s: float, bucket_s: float = 3600.0):
        self.window_s = window_s
        self.bucket_s = bucket_s
        self._buckets: dict[object, deque[list[float]]] = defaultdict(deque)  # [index, amount]
        self._totals: dict[object, float] = defaultdict(float)

    def charge(self, key: object, start_s: float, end_s: float, rate: float) -> None:
        if end_s <= start_s or rate == 0:
            return
        buckets = self._buckets[key]
        t = start_s
        while t < end_s:
            idx = math.floor(t / self.bucket_s)
            stop = min(end_s, (idx + 1) * self.bucket_s)
            amount = (stop - t) * rate
            if buckets and buckets[-1][0] == idx:
                buckets[-1][1] += amount
            else:
                buckets.append([idx, amount])
            self._totals[key] += amount
            t = stop

    def value(self, key: object, now_s: float) -> float:
        buckets = self._buckets.get(key)
        if not buckets:
            return 0.0
        oldest = math.floor((now_s - self.window_s) / self.bucket_s)
        while buckets and buckets[0][0] < oldest:
            self._totals[key] -= buckets.popleft()[1]
        return max(self._totals[key], 0.0)

    def keys(self):
        return list(self._buckets)


class DecayedUsage:
    def __init__(self, half_life_s: float):
        self.k = math.log(2) / half_life_s
        self._value: dict[object, float] = defaultdict(float)
        self._at: dict[object, float] = {}

    def _decay_to(self, key: object, t: float) -> None:
        at = self._at.get(key)
        if at is not None and t > at:
            self._value[key] *= math.exp(-self.k * (t - at))
        if at is None or t > at:
            self._at[key] = t

    def charge(self, key: object, start_s: float, end_s: float, rate: float) -> None:
        if end_s <= start_s or rate == 0:
            return
        self._decay_to(key, end_s)
        # Integral of rate * exp(-k (end - t)) dt over [start, end]: exact for a constant rate.
        self._value[key] += rate * (1 - math.exp(-self.k * (end_s - start_s))) / self.k

    def value(self, key: object, now_s: float) -> float:
        if key not in self._at:
            return 0.0
        self._decay_to(key, now_s)
        return self._value[key]

    def keys(self):
        return list(self._at)
