"""One scheduling pass for one cluster: lock, snapshot, engine, apply, commit, then dispatch.

The pass holds the cluster row (``SELECT ... FOR NO KEY UPDATE SKIP LOCKED``) inside its own
transaction: a second pass for the same cluster skips instead of waiting, and a worker that dies
mid-pass (SIGKILL, a lost machine) releases the row with its connection, so the next pass runs at
once. (A lock committed before the work, released in a ``finally``, outlived every killed worker
and stalled its cluster for the whole TTL: the fault-injection suite found it.)

SQLite (the zero-server demo) has one lock for the whole database, taken at ``BEGIN IMMEDIATE``:
a pass that held it through snapshot and engine kept every job submission waiting, and under
load some waited out the busy timeout ("database is locked", a 500). There the pass reads and
computes outside any transaction (WAL: reads neither wait nor block) and takes the write lock
only to re-check and apply, see ``run_pass_optimistic``.

``acquire_lock`` still lets an operator or a test hold a cluster's passes for a while: a pass
skips a cluster whose ``pass_lock_until`` lies in the future.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from core.faults import fault_point
from core.logs import event
from scheduling.apply import apply_decisions, split_decisions
from scheduling.engine import schedule
from scheduling.models import Cluster, Job
from scheduling.snapshot import SnapshotContext, _reservations, build_snapshot

log = logging.getLogger(__name__)
LOCK_TTL = timedelta(seconds=120)


@dataclass(frozen=True)
class PassResult:
    ran: bool
    cluster: str = ""
    started: int = 0
    preempted: int = 0
    waiting: int = 0
    elapsed_ms: float = 0.0


def _logged(result: PassResult) -> PassResult:
    event(log, "pass", cluster=result.cluster, started=result.started,
          preempted=result.preempted, waiting=result.waiting,
          elapsed_ms=round(result.elapsed_ms, 1))  # fmt: skip
    return result


def acquire_lock(cluster_id: int, ttl: timedelta = LOCK_TTL) -> str | None:
    now = timezone.now()
    token = uuid.uuid4().hex
    taken = Cluster.objects.filter(
        Q(pass_lock_until__isnull=True) | Q(pass_lock_until__lt=now), pk=cluster_id
    ).update(pass_lock_token=token, pass_lock_until=now + ttl)
    return token if taken == 1 else None


def release_lock(cluster_id: int, token: str) -> None:
    Cluster.objects.filter(pk=cluster_id, pass_lock_token=token).update(
        pass_lock_token="", pass_lock_until=None
    )


def run_pass(cluster_id: int) -> PassResult:
    """Run one pass unless another worker is already scheduling this cluster."""
    if connection.vendor == "sqlite":
        return run_pass_optimistic(cluster_id)
    began = time.perf_counter()
    with transaction.atomic():
        now = timezone.now()
        cluster = (
            # NO KEY: rows that merely reference the cluster (jobs, their foreign-key checks at
            # commit) must not wait for the pass, or a sync and a pass deadlock.
            Cluster.objects.select_for_update(skip_locked=True, no_key=True)
            .filter(Q(pass_lock_until__isnull=True) | Q(pass_lock_until__lt=now), pk=cluster_id)
            .first()
        )
        if cluster is None:
            log.info("cluster %s: a pass is already running; skipping", cluster_id)
            return PassResult(ran=False)
        fault_point("pass.locked")
        ctx = build_snapshot(cluster, now)
        decisions = schedule(ctx.snapshot)
        counts = apply_decisions(ctx, decisions, now, cluster)
        fault_point("pass.before_commit")
        elapsed = (time.perf_counter() - began) * 1000
        Cluster.objects.filter(pk=cluster_id).update(last_pass_at=now, last_pass_ms=elapsed)
    return _logged(PassResult(ran=True, cluster=cluster.name, elapsed_ms=elapsed, **counts))


# --- SQLite: compute outside the write lock, re-check and apply under it -------------------------

ATTEMPTS = 3
# Starts applied per write transaction. The demo's first pass starts the whole seeded backlog
# (59 jobs on jupiter); each start writes its row, an event and its share of the liens, and in
# one transaction that held SQLite's only write lock for the lot.
STARTS_PER_TRANSACTION = 12
_in_flight: set[int] = set()  # clusters this process is scheduling now (the demo's thread pool)
_in_flight_lock = threading.Lock()


@contextmanager
def _only_one_here(cluster_id: int):
    """A pass already running in this process for the cluster: skip instead of computing the
    same decisions twice. Process-local, so it dies with the worker (no stale lock); a pass in
    another process is caught by the re-check."""
    with _in_flight_lock:
        mine = cluster_id not in _in_flight
        _in_flight.add(cluster_id)
    try:
        yield mine
    finally:
        if mine:
            with _in_flight_lock:
                _in_flight.discard(cluster_id)


def _marker(cluster_id: int):
    """What every committed pass of the cluster changes (and an operator's hold)."""
    return (
        Cluster.objects.filter(pk=cluster_id)
        .values_list("last_pass_at", "last_pass_ms", "pass_lock_until")
        .first()
    )


# What a job must still hold for decisions computed on it (``_stale``).
_CHECKED = ("state", "attempt_key", "held", "max_protection_s", "protected_until")


def _stale(ctx: SnapshotContext, cluster: Cluster, marker, now) -> str | None:
    """Why decisions computed on ``ctx`` may no longer hold, or None; run under the write lock.

    Tolerated, because they only free capacity or add work the next pass sees: new
    submissions, and running jobs that ended meanwhile (their rows' states are refreshed, so
    apply neither preempts nor explains them). Anything else discards the decisions: another
    pass committed, a pending job was cancelled or held or got a protection exception, a
    running job's protection or attempt changed, a node was drained or a reservation moved.
    """
    if _marker(cluster.pk) != marker:
        return "another pass committed"
    current = {
        str(pk): row
        for pk, *row in Job.objects.filter(
            cluster_id=cluster.pk, state__in=[Job.State.PENDING, Job.State.RUNNING]
        ).values_list("pk", *_CHECKED)
    }
    ended = []
    jobs = ctx.jobs
    for key in jobs:
        row = current.get(key)
        read = [jobs.value(key, name) for name in _CHECKED]
        if read[0] == Job.State.PENDING:
            if row is None or row[:4] != read[:4]:
                return f"job {key} changed"
        elif row is None or row[0] != Job.State.RUNNING:
            ended.append(int(key))
        elif row[1:] != read[1:]:
            return f"job {key} changed"
    for pk, state in Job.objects.filter(pk__in=ended).values_list("pk", "state"):
        ctx.jobs[str(pk)].state = state
    nodes = [
        (n.name, n.gpu_type, n.gpus, n.drained)
        for n in cluster.nodes.filter(present=True).order_by("name")
    ]
    if nodes != [(n.name, n.gpu_type, n.gpus, n.drained) for n in ctx.snapshot.nodes]:
        return "a node changed"
    if _reservations(cluster, now) != ctx.snapshot.reservations:
        return "a reservation changed"
    return None


def run_pass_optimistic(cluster_id: int) -> PassResult:
    """One pass that holds the write lock only to apply its decisions, a few starts at a time.

    1. Read the cluster's pass marker and build the snapshot in autocommit: with WAL these
       reads never wait for a writer, and nobody waits for them.
    2. Run the engine, still outside any transaction.
    3. Apply the decisions in parts of at most ``STARTS_PER_TRANSACTION`` starts
       (``apply.split_decisions``), each in a write transaction of its own: re-check what the
       decisions rest on (``_stale``); if it all holds, apply the part as the locked pass does
       (the lien is still taken on the current balance) and stamp the marker, and remember
       the stamp, so the next part accepts this pass's own writes and nothing else's. A
       submission waits for one part, not the whole backlog.
    4. If a re-check fails, the parts not yet applied are dropped and the pass starts again
       from 1 on what is now committed (a few times at most; the next beat tries anyway). A
       pass of another process that computed before a part was committed finds the marker
       moved and computes again too, so no two passes ever apply decisions on the same GPUs.
    """
    with _only_one_here(cluster_id) as mine:
        if not mine:
            log.info("cluster %s: a pass is already running here; skipping", cluster_id)
            return PassResult(ran=False)
        started = preempted = 0
        for _attempt in range(ATTEMPTS):
            began = time.perf_counter()
            now = timezone.now()
            cluster = Cluster.objects.filter(
                Q(pass_lock_until__isnull=True) | Q(pass_lock_until__lt=now), pk=cluster_id
            ).first()
            if cluster is None:
                log.info("cluster %s: passes are held; skipping", cluster_id)
                return PassResult(ran=False)
            marker = (cluster.last_pass_at, cluster.last_pass_ms, cluster.pass_lock_until)
            fault_point("pass.locked")
            ctx = build_snapshot(cluster, now)
            decisions = schedule(ctx.snapshot)
            parts = split_decisions(decisions, STARTS_PER_TRANSACTION)
            for part in parts:
                with transaction.atomic():
                    why = _stale(ctx, cluster, marker, now)
                    if why is not None:
                        break
                    counts = apply_decisions(ctx, part, now, cluster, final=part is parts[-1])
                    fault_point("pass.before_commit")
                    elapsed = (time.perf_counter() - began) * 1000
                    Cluster.objects.filter(pk=cluster_id).update(
                        last_pass_at=now, last_pass_ms=elapsed
                    )
                    marker = _marker(cluster_id)
                started += counts["started"]
                preempted += counts["preempted"]
            else:
                return _logged(
                    PassResult(
                        ran=True,
                        cluster=cluster.name,
                        started=started,
                        preempted=preempted,
                        waiting=counts["waiting"],
                        elapsed_ms=elapsed,
                    )
                )
            log.info("cluster %s: %s during the pass; computing again", cluster_id, why)
        return PassResult(ran=False)
