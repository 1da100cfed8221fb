"""One scheduling pass for one cluster: lock, snapshot, engine, apply, commit, then dispatch.

The lock is a conditional UPDATE on the cluster row (``pass_lock_until`` in the past or empty →
take it), so it works on SQLite and PostgreSQL alike and a worker that dies mid-pass only holds
the cluster until the lock's TTL runs out.
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
    token = acquire_lock(cluster_id)
    if token is None:
        log.info("cluster %s: a pass is already running; skipping", cluster_id)
        return PassResult(ran=False)
    try:
        return _run_locked(cluster_id)
    finally:
        release_lock(cluster_id, token)


def _run_locked(cluster_id: int) -> PassResult:
    began = time.perf_counter()
    with transaction.atomic():
        cluster = Cluster.objects.get(pk=cluster_id)
        now = timezone.now()
        ctx = build_snapshot(cluster, now)
        decisions = schedule(ctx.snapshot)
        counts = apply_decisions(ctx, decisions, now, cluster)
        elapsed = (time.perf_counter() - began) * 1000
        Cluster.objects.filter(pk=cluster_id).update(last_pass_at=now, last_pass_ms=elapsed)
    return PassResult(ran=True, elapsed_ms=elapsed, **counts)
