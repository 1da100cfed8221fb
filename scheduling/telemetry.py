"""GPU utilisation of running jobs from real telemetry: NVIDIA's DCGM exporter, scraped by the
organisation's Prometheus, read through the Prometheus HTTP API at
``ALLOT_GPU_TELEMETRY_URL``.

The exporter labels each GPU's ``DCGM_FI_DEV_GPU_UTIL`` (0–100) with what runs on it:
``hpc_job`` (the Slurm job id, with its ``--hpc-job-mapping-dir``) and ``pod`` (on Kubernetes,
with its pod mapping). Allot knows each attempt's Slurm job id and Kubernetes Job name
(``Job.external_id``; a Job's pods are named ``<job name>-<suffix>``), so:

1. two instant queries, the mean utilisation per ``hpc_job`` and per ``pod``;
2. each running job on a Slurm or Kubernetes cluster takes the reading of its id (the mean of
   its pods' on Kubernetes); a job with no reading keeps what it had;
3. per job, in one short transaction: below ``LOW_UTILIZATION`` the low spell starts (or goes
   on, and the GPU-seconds since the last reading count as wasted); at or above it the spell
   ends;
4. a funded job low for over ``IDLE_AFTER`` is idle (the pages flag it); its owner is told
   once per spell (an in-app notification, an email, a line on the job's timeline).

The simulated backend reports utilisation itself through reconcile, which applies the same
rules (``utilization_changes``, ``tell_owner``); this module reads only clusters whose backend
cannot.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import httpx
from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from scheduling import signals
from scheduling.models import Cluster, Job, JobEvent
from scheduling.reports import IDLE_AFTER

log = logging.getLogger(__name__)

LOW_UTILIZATION = 0.10  # below this a job's GPUs count as idle (the pages say "under 10 %")

METRIC = "DCGM_FI_DEV_GPU_UTIL"
QUERIES = {
    "hpc_job": f'avg by (hpc_job) ({METRIC}{{hpc_job!=""}})',
    "pod": f'avg by (pod) ({METRIC}{{pod!=""}})',
}
# A reading counts as wasted time since the previous one up to this long: after a telemetry
# outage the gap is not known to have been idle.
MAX_GAP = timedelta(minutes=10)


class TelemetryError(Exception):
    """The telemetry source could not be read (the message names no URL)."""


def query(base_url: str, promql: str) -> list[dict]:
    try:
        response = httpx.get(
            base_url.rstrip("/") + "/api/v1/query",
            params={"query": promql},
            timeout=settings.ALLOT_GPU_TELEMETRY_TIMEOUT_S,
        )
        response.raise_for_status()
        body = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise TelemetryError(f"telemetry query failed: {type(exc).__name__}") from exc
    if body.get("status") != "success" or body["data"].get("resultType") != "vector":
        raise TelemetryError(f"telemetry query answered {body.get('error', body.get('status'))}")
    return body["data"]["result"]


def fetch(base_url: str) -> dict[str, dict[str, float]]:
    """{"hpc_job": {slurm id: utilisation 0–1}, "pod": {pod name: utilisation 0–1}}."""
    out: dict[str, dict[str, float]] = {}
    for label, promql in QUERIES.items():
        out[label] = {
            series["metric"][label]: float(series["value"][1]) / 100
            for series in query(base_url, promql)
            if series["metric"].get(label)
        }
    return out


def match(jobs, readings: dict[str, dict[str, float]]) -> dict[int, float]:
    """{job id: utilisation} for the jobs the readings name."""
    pods_by_job: dict[str, list[float]] = defaultdict(list)
    for pod, value in readings.get("pod", {}).items():
        owner, _, _ = pod.rpartition("-")  # a Job's pod: <job name>-<5-character suffix>
        if owner:
            pods_by_job[owner].append(value)
    out = {}
    for job_id, backend, external_id in jobs:
        if not external_id:
            continue
        if backend == Cluster.Backend.SLURM and external_id in readings.get("hpc_job", {}):
            out[job_id] = readings["hpc_job"][external_id]
        elif backend == Cluster.Backend.KUBERNETES and pods_by_job.get(external_id):
            values = pods_by_job[external_id]
            out[job_id] = sum(values) / len(values)
    return out


@dataclass
class TelemetryReport:
    read: int = 0
    low: int = 0
    notified: list[int] = field(default_factory=list)


def utilization_changes(job: Job, utilization: float, now: datetime) -> tuple[dict, bool]:
    """What one reading changes on ``job`` (steps 3 and 4 above), and whether its owner is to
    be told now. Shared with reconcile, for backends that report utilisation themselves."""
    changes: dict = {"gpu_utilization": utilization, "utilization_at": now}
    if utilization >= LOW_UTILIZATION:
        changes.update(low_utilization_since=None, idle_notified_at=None)
        return changes, False
    since = job.low_utilization_since or now
    changes["low_utilization_since"] = since
    if job.low_utilization_since and job.utilization_at:
        gap = min(max(now - job.utilization_at, timedelta(0)), MAX_GAP)
        changes["wasted_gpu_seconds"] = job.wasted_gpu_seconds + int(job.gpus * gap.total_seconds())
    tell = bool(job.funded) and now - since > IDLE_AFTER and job.idle_notified_at is None
    if tell:
        changes["idle_notified_at"] = now
    return changes, tell


def record(job_id: int, utilization: float, now: datetime) -> tuple[bool, bool]:
    """One job's reading: (low, owner told). Locked, so two readers at once count no
    interval twice."""
    with transaction.atomic():
        job = (
            Job.objects.select_for_update(of=("self",))
            .select_related("owner", "project")
            .filter(pk=job_id, state=Job.State.RUNNING)
            .first()
        )
        if job is None:
            return False, False
        changes, tell = utilization_changes(job, utilization, now)
        for name, value in changes.items():
            setattr(job, name, value)
        job.save(update_fields=list(changes))
        if tell:
            tell_owner(job, utilization, job.low_utilization_since, now)
    return utilization < LOW_UTILIZATION, tell


def idle_sentence(job: Job, utilization: float, since: datetime, now: datetime, rate: float):
    minutes = int((now - since).total_seconds() // 60)
    hours, minutes = divmod(minutes, 60)
    parts = [f"{hours} h"] if hours else []
    parts += [f"{minutes} min"] if minutes else []
    spell = " ".join(parts) or "under a minute"
    who = job.project.slug_path if job.project_id else "nobody"
    return (
        f"Job #{job.pk} {job.name} has used {utilization * 100:.0f} % of its GPUs for {spell}: "
        f"it costs {who} {rate:g} GPU-hours an hour."
    )


def tell_owner(job: Job, utilization: float, since: datetime, now: datetime) -> None:
    from django.core.mail import send_mail

    from scheduling.explain import cost_factor

    message = idle_sentence(job, utilization, since, now, job.gpus * cost_factor(job))
    JobEvent.objects.create(job=job, at=now, kind="idle", message=message[:400])
    # In-app notifications live with the exceptions inbox, an app above this one: it listens.
    signals.job_idle.send(sender=Job, job=job, message=message, at=now)
    if job.owner.email:
        link = settings.ALLOT_BASE_URL.rstrip("/") + reverse("job-explain", args=[job.pk])
        body = f"{message}\n\nFree its GPUs if it is not working: {link}\n"

        def send():
            try:
                send_mail(
                    f"[Allot] Job #{job.pk} is idle",
                    body,
                    settings.DEFAULT_FROM_EMAIL,
                    [job.owner.email],
                )
            except Exception:  # noqa: BLE001 - a mail server down must not undo the reading
                log.exception("could not email %s about idle job %s", job.owner.email, job.pk)

        transaction.on_commit(send)


def read_and_record(base_url: str | None = None, now: datetime | None = None) -> TelemetryReport:
    base_url = base_url if base_url is not None else settings.ALLOT_GPU_TELEMETRY_URL
    report = TelemetryReport()
    if not base_url:
        return report
    now = now or timezone.now()
    jobs = list(
        Job.objects.filter(
            state=Job.State.RUNNING,
            cluster__backend__in=[Cluster.Backend.SLURM, Cluster.Backend.KUBERNETES],
        ).values_list("pk", "cluster__backend", "external_id")
    )
    if not jobs:
        return report
    for job_id, utilization in match(jobs, fetch(base_url)).items():
        low, told = record(job_id, utilization, now)
        report.read += 1
        report.low += int(low)
        if told:
            report.notified.append(job_id)
    return report
