"""One scheduling pass for one cluster: lock, snapshot, engine, apply, commit, then dispatch.

The pass holds the cluster row (``SELECT ... FOR NO KEY UPDATE SKIP LOCKED``) inside its own
transaction: a second pass for the same cluster skips instead of waiting, and a worker that dies
mid-pass (SIGKILL, a lost machine) releases the row with its connection, so the next pass runs at
once. (A lock committed before the work, released in a ``finally``, outlived every killed worker
and stalled its cluster for the whole TTL: the fault-injection suite found it.) On SQLite, which
has no row locks, the IMMEDIATE transaction already serialises passes.

``acquire_lock`` still lets an operator or a test hold a cluster's passes for a while: a pass
skips a cluster whose ``pass_lock_until`` lies in the future.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from portal.faults import fault_point
from scheduling.apply import apply_decisions
from scheduling.engine import schedule
from scheduling.models import Cluster
from scheduling.snapshot import build_snapshot

log = logging.getLogger(__name__)
LOCK_TTL = timedelta(seconds=120)


@dataclass(frozen=True)
class PassResult:
    ran: bool
    started: int = 0
    preempted: int = 0
    waiting: int = 0
    elapsed_ms: float = 0.0


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
    return PassResult(ran=True, elapsed_ms=elapsed, **counts)
