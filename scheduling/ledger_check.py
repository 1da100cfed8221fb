"""Reconciling the ledger with the backends' own records: what Allot charged for each attempt
against what the backend says the attempt held (``manage.py reconcile_ledger``).

1. Ask the cluster's backend for the attempts it knows (``Backend.sync``) and keep those it
   reports finished, with a start and an end (``--since``: started at or after it).
2. Keep those Allot has closed too (an earlier attempt of the job, or a job no longer
   running): an attempt Allot still counts as running is charged only to the last sync.
3. The attempt's charges are the job's ledger rows (reversals included) from its start event
   to the next attempt's; attempts without a charge were unfunded and are skipped.
4. The backend's figure is GPUs × (end − start), stopped where the attempt's funding ran out
   (its ``unfunded`` event), if it did. A difference above the tolerance is reported.

``record_check`` is the periodic run (Celery beat, ``ALLOT_LEDGER_CHECK_INTERVAL_S``): the
same comparison over the last ``ALLOT_LEDGER_CHECK_WINDOW_S``, one log event per difference,
and the cluster's ``LedgerCheck`` row replaced for /operations and ``/metrics``. Like the
command it repairs nothing: a gap is for an operator to look into.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db.models import Sum
from django.utils import timezone

from core.logs import event
from scheduling.backends.base import BackendUnavailable, RemoteState
from scheduling.models import Cluster, Job, LedgerCheck

log = logging.getLogger(__name__)

TOLERANCE_GPU_S = 36  # 0.01 GPU-hour, the command's default
WORST = 5  # the differences /operations lists per cluster
FINISHED = (RemoteState.COMPLETED, RemoteState.FAILED, RemoteState.CANCELLED, RemoteState.PREEMPTED)


@dataclass(frozen=True)
class Difference:
    cluster: str
    job_id: int
    attempt_key: str
    charged_gpu_s: int
    backend_gpu_s: int

    @property
    def gap_gpu_s(self) -> int:
        return self.charged_gpu_s - self.backend_gpu_s

    @property
    def gpu_hours(self) -> float:
        return self.gap_gpu_s / 3600

    def __str__(self) -> str:
        return (
            f"{self.cluster} job {self.job_id} attempt {self.attempt_key}: charged "
            f"{self.charged_gpu_s / 3600:,.2f} GPU-h, the backend says "
            f"{self.backend_gpu_s / 3600:,.2f} ({self.gpu_hours:+,.2f})"
        )


def differences(
    cluster: Cluster, since: datetime | None = None, tolerance_gpu_s: int = TOLERANCE_GPU_S
) -> list[Difference]:
    """The attempts of ``cluster`` whose charges differ from the backend's record by more
    than ``tolerance_gpu_s`` GPU-seconds. Raises BackendUnavailable when it does not answer."""
    from budgets.models import UsageEntry
    from scheduling.dispatch import attempt_of, backend_for

    remotes = [
        r
        for r in backend_for(cluster).sync()
        if r.state in FINISHED
        and r.started_at is not None
        and r.ended_at is not None
        and (since is None or r.started_at >= since.timestamp())
    ]
    jobs = Job.objects.in_bulk({r.job_id for r in remotes})
    found = []
    for remote in remotes:
        job = jobs.get(remote.job_id)
        attempt = attempt_of(remote.attempt_key, remote.job_id)
        if job is None or job.cluster_id != cluster.pk or attempt is None:
            continue
        if attempt == job.attempt and job.state == Job.State.RUNNING:
            continue  # Allot has not closed it yet
        starts = list(
            job.events.filter(kind=Job.State.RUNNING)
            .order_by("at", "pk")
            .values_list("at", flat=True)
        )
        if attempt > len(starts):
            continue
        rows = UsageEntry.objects.filter(job_ref=job.pk, interval_start__gte=starts[attempt - 1])
        if attempt < len(starts):
            rows = rows.filter(interval_start__lt=starts[attempt])
        charged = rows.aggregate(total=Sum("gpu_seconds"))["total"]
        if not charged:
            continue  # unfunded: free
        began = datetime.fromtimestamp(remote.started_at, tz=UTC)
        ended = datetime.fromtimestamp(remote.ended_at, tz=UTC)
        ran_out = (
            job.events.filter(kind="unfunded", at__gte=began, at__lt=ended)
            .order_by("at")
            .values_list("at", flat=True)
            .first()
        )
        seconds = max(0, int(((ran_out or ended) - began).total_seconds()))
        expected = job.gpus * seconds
        if abs(charged - expected) > tolerance_gpu_s:
            found.append(Difference(cluster.name, job.pk, remote.attempt_key, charged, expected))
    return found


def record_check(cluster_id: int) -> LedgerCheck | None:
    """Run the check over the recent window, log each difference and store the result on the
    cluster's ``LedgerCheck``. A backend that does not answer leaves the last answer's figures
    in place (their ``checked_at`` ages) and records why. None if the cluster is gone."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return None
    now = timezone.now()
    since = now - timedelta(seconds=settings.ALLOT_LEDGER_CHECK_WINDOW_S)
    try:
        found = differences(cluster, since)
    except BackendUnavailable as exc:
        event(log, "ledger_check_unreachable", logging.WARNING, cluster=cluster.name,
              error=str(exc))  # fmt: skip
        check, _ = LedgerCheck.objects.update_or_create(
            cluster=cluster, defaults={"error": str(exc)[:2000]}
        )
        return check
    for d in found:
        event(log, "ledger_difference", logging.WARNING, cluster=d.cluster, job=d.job_id,
              attempt=d.attempt_key, charged_gpu_seconds=d.charged_gpu_s,
              backend_gpu_seconds=d.backend_gpu_s, gap_gpu_seconds=d.gap_gpu_s)  # fmt: skip
    worst = sorted(found, key=lambda d: (-abs(d.gap_gpu_s), d.job_id))[:WORST]
    names = dict(Job.objects.filter(pk__in=[d.job_id for d in worst]).values_list("pk", "name"))
    gap = sum(abs(d.gap_gpu_s) for d in found)
    check, _ = LedgerCheck.objects.update_or_create(
        cluster=cluster,
        defaults={
            "checked_at": now,
            "since": since,
            "differences": len(found),
            "gap_gpu_seconds": gap,
            "worst": [
                {
                    "job_id": d.job_id,
                    "job_name": names.get(d.job_id, ""),
                    "attempt_key": d.attempt_key,
                    "charged_gpu_s": d.charged_gpu_s,
                    "backend_gpu_s": d.backend_gpu_s,
                }
                for d in worst
            ],
            "error": "",
        },
    )
    event(log, "ledger_check", cluster=cluster.name, differences=len(found), gap_gpu_seconds=gap)
    return check
