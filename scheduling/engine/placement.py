"""Gang placement over a pool of nodes (one cluster, one GPU type).

A job gets all its GPUs at once: on one node when it fits in the largest node of the pool,
otherwise on whole, entirely free nodes (all but the last used in full). Single-node jobs go
to the node with the fewest free GPUs that still fits (best fit), so whole nodes stay whole
for the large jobs that need them; ties go to the node that sorts first by name.

Free capacity is indexed by free-GPU count (``by_free[f]`` = nodes with exactly f free), so
finding a best-fit node costs O(GPUs per node), not O(nodes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Held:
    """Nodes kept for a waiting job (or an approved reservation) from ``start_s`` on."""

    holder: str  # job id, or "reservation:<id>"
    start_s: float
    project: str  # the holder's project: its own work may always use them
    reservation: bool = False


@dataclass
class Pool:
    cluster: str
    gpu_type: str
    names: list[str]
    size: list[int]
    free: list[int]
    drained: list[bool]
    jobs: list[dict[str, int]]  # per node: running job id -> GPUs it uses there
    by_free: dict[int, set[int]] = field(default_factory=dict)
    held: dict[int, Held] = field(default_factory=dict)
    whole: set[int] = field(default_factory=set)  # listed nodes with every GPU free
    max_size: int = 0
    _fits: dict[int, bool] = field(default_factory=dict)
    _max_free: int = -1
    version: list[int] = field(default_factory=list)  # per node, bumped on every change
    stamp: int = 0  # bumped on every change of any node
    total_gpus: int = 0  # on nodes that are not drained

    def index(self) -> None:
        self.by_free = {}
        self.whole = set()
        self._max_free = -1
        self.version = [0] * len(self.names)
        self.max_size = max(self.size, default=0)
        self.total_gpus = 0
        for i, f in enumerate(self.free):
            if self.drained[i]:
                continue
            self.total_gpus += self.size[i]
            if i not in self.held:
                self.by_free.setdefault(f, set()).add(i)
                if f == self.size[i] and f > 0:
                    self.whole.add(i)

    def _unlist(self, i: int) -> None:
        self._max_free = -1
        self.version[i] += 1
        self.stamp += 1
        bucket = self.by_free.get(self.free[i])
        if bucket is not None:
            bucket.discard(i)
        self.whole.discard(i)

    def _list(self, i: int) -> None:
        if not self.drained[i] and i not in self.held:
            self.by_free.setdefault(self.free[i], set()).add(i)
            if self.free[i] == self.size[i] and self.free[i] > 0:
                self.whole.add(i)

    def take(self, i: int, job_id: str, gpus: int) -> None:
        self._unlist(i)
        self.free[i] -= gpus
        self.jobs[i][job_id] = self.jobs[i].get(job_id, 0) + gpus
        self._list(i)

    def release(self, i: int, job_id: str) -> None:
        gpus = self.jobs[i].pop(job_id, 0)
        self._unlist(i)
        self.free[i] += gpus
        self._list(i)

    def hold(self, i: int, held: Held) -> None:
        self._unlist(i)
        self.held[i] = held

    def max_free(self) -> int:
        """Most free GPUs on one listed node; cached until the next take/release/hold."""
        if self._max_free < 0:
            self._max_free = 0
            for f in range(self.max_size, 0, -1):
                if self.by_free.get(f):
                    self._max_free = f
                    break
        return self._max_free

    def whole_free(self) -> list[int]:
        return list(self.whole)

    def is_multi(self, gpus: int) -> bool:
        return gpus > self.max_size

    def fits_ever(self, gpus: int) -> bool:
        """Could this pool hold the job if it were empty (drained nodes left out)?"""
        hit = self._fits.get(gpus)
        if hit is None:
            hit = self._fits[gpus] = self._fits_ever(gpus)
        return hit

    def _fits_ever(self, gpus: int) -> bool:
        if not self.is_multi(gpus):
            return any(s >= gpus for s, d in zip(self.size, self.drained, strict=True) if not d)
        return gpus <= self.total_gpus

    def fits_if_undrained(self, gpus: int) -> bool:
        if not self.is_multi(gpus):
            return self.max_size >= gpus
        return gpus <= sum(self.size)

    def find(self, gpus: int, usable_held=None) -> tuple[tuple[int, int], ...] | None:
        """Best-fit placement among free, unheld nodes, then among held nodes the caller may
        backfill (``usable_held(held) -> bool``). Returns ((node index, GPUs), ...)."""
        if not self.is_multi(gpus):
            if gpus <= self.max_free():
                for f in range(gpus, self.max_size + 1):
                    bucket = self.by_free.get(f)
                    if bucket:
                        return ((min(bucket), gpus),)
            if usable_held is not None:
                best = None
                for i, h in self.held.items():
                    if not self.drained[i] and self.free[i] >= gpus and usable_held(h):
                        cand = (self.free[i], i)
                        if best is None or cand < best:
                            best = cand
                if best is not None:
                    return ((best[1], gpus),)
            return None
        if usable_held is None and len(self.whole) * self.max_size < gpus:
            return None
        whole = self.whole_free()
        if usable_held is not None:
            whole += [
                i
                for i, h in self.held.items()
                if not self.drained[i] and self.free[i] == self.size[i] and usable_held(h)
            ]
        return self.spread(gpus, whole)

    def spread(self, gpus: int, candidates: list[int]) -> tuple[tuple[int, int], ...] | None:
        """Lay a multi-node job over whole nodes from ``candidates`` (largest first)."""
        chosen: list[tuple[int, int]] = []
        left = gpus
        for i in sorted(candidates, key=lambda i: (-self.size[i], i)):
            if left <= 0:
                break
            use = min(self.size[i], left)
            chosen.append((i, use))
            left -= use
        return tuple(chosen) if left <= 0 else None

    def nodes_needed(self, gpus: int) -> int:
        return math.ceil(gpus / self.max_size) if self.max_size else 0
