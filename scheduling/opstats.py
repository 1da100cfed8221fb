"""Latency histograms of the live loop, kept in the database (``OperationStat``) so the Celery
workers that time an operation and the web process that answers ``/metrics`` see the same
numbers, across processes and restarts.

``timed("pass", cluster)`` around an operation records its duration, and an error when it
raises (the exception still propagates). One UPDATE per observation; the bucket rows of a new
(operation, cluster) pair are created once, and creating them twice at once is harmless (the
unique constraint and ``ignore_conflicts``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DatabaseError
from django.db.models import F

from scheduling.models import OperationStat

log = logging.getLogger(__name__)

# Seconds. A pass on a 1,024-GPU cluster takes tens of milliseconds to a few seconds; an sbatch
# over ssh or a Kubernetes API call a fraction of a second; a slow backend tens of seconds.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
OPERATIONS = ("pass", "dispatch", "reconcile", "charge", "telemetry")


def observe(operation: str, cluster: str, seconds: float, error: bool = False) -> None:
    seconds = max(0.0, float(seconds))
    rows = OperationStat.objects.filter(operation=operation, cluster=cluster, le__gte=seconds)
    changes = {
        "count": F("count") + 1,
        "sum_seconds": F("sum_seconds") + seconds,
        "errors": F("errors") + int(error),
    }
    if rows.update(**changes):
        return
    OperationStat.objects.bulk_create(
        [
            OperationStat(operation=operation, cluster=cluster, le=le)
            for le in (*BUCKETS, OperationStat.INF_LE)
        ],
        ignore_conflicts=True,
    )
    rows.update(**changes)


@contextmanager
def timed(operation: str, cluster: str = "") -> Iterator[dict]:
    """Time the block. The caller may set ``outcome["error"] = True`` for a failure that
    does not raise (a backend that answered with an error the operation recorded)."""
    outcome = {"error": False}
    started = time.perf_counter()
    try:
        yield outcome
    except BaseException:
        outcome["error"] = True
        raise
    finally:
        try:
            observe(operation, cluster, time.perf_counter() - started, outcome["error"])
        except DatabaseError:
            # The database that failed the operation cannot take its timing either; the
            # operation's own error (if any) is the one to see.
            log.warning("could not record the %s latency of %r", operation, cluster)


def histograms() -> dict[tuple[str, str], dict]:
    """{(operation, cluster): {"buckets": [(le, cumulative count)], "count", "sum", "errors"}}
    in one query."""
    out: dict[tuple[str, str], dict] = {}
    for row in OperationStat.objects.order_by("operation", "cluster", "le"):
        entry = out.setdefault(
            (row.operation, row.cluster), {"buckets": [], "count": 0, "sum": 0.0, "errors": 0}
        )
        if row.le >= OperationStat.INF_LE:
            entry.update(count=row.count, sum=row.sum_seconds, errors=row.errors)
        else:
            entry["buckets"].append((row.le, row.count))
    return out
