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
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django.db.models import Sum

from scheduling.backends.base import RemoteState
from scheduling.models import Cluster, Job

FINISHED = (RemoteState.COMPLETED, RemoteState.FAILED, RemoteState.CANCELLED, RemoteState.PREEMPTED)


@dataclass(frozen=True)
class Difference:
    cluster: str
    job_id: int
    attempt_key: str
    charged_gpu_s: int
    backend_gpu_s: int

    @property
    def gpu_hours(self) -> float:
        return (self.charged_gpu_s - self.backend_gpu_s) / 3600

    def __str__(self) -> str:
        return (
            f"{self.cluster} job {self.job_id} attempt {self.attempt_key}: charged "
            f"{self.charged_gpu_s / 3600:,.2f} GPU-h, the backend says "
            f"{self.backend_gpu_s / 3600:,.2f} ({self.gpu_hours:+,.2f})"
        )


def differences(
    cluster: Cluster, since: datetime | None = None, tolerance_gpu_s: int = 36
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
