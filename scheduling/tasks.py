"""Celery tasks: take ids, re-fetch, call a service; safe to run twice."""

from __future__ import annotations

import logging

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings

from scheduling import discovery, ledger_check, reconcile, telemetry
from scheduling.accounting import charge_running_jobs
from scheduling.backends.base import BackendUnavailable
from scheduling.demo import keep_demand
from scheduling.dispatch import (
    backend_for,
    start_many_on_backend,
    start_on_backend,
    stop_on_backend,
)
from scheduling.models import Cluster, Job, Node
from scheduling.opstats import timed
from scheduling.passes import run_pass

logger = logging.getLogger(__name__)

RETRY = dict(
    autoretry_for=(BackendUnavailable,),
    retry_backoff=2,
    retry_backoff_max=120,
    retry_jitter=True,
    max_retries=12,
)


@shared_task(ignore_result=True)
def schedule_all() -> None:
    for cluster_id in Cluster.objects.values_list("pk", flat=True):
        schedule_cluster.delay(cluster_id)


@shared_task(ignore_result=True)
def schedule_cluster(cluster_id: int) -> dict:
    with timed("pass", _cluster_name(cluster_id=cluster_id)):
        result = run_pass(cluster_id)
    return result.__dict__


def _cluster_name(cluster_id: int | None = None, job_id: int | None = None) -> str:
    """The cluster label of an operation's latency (one small query)."""
    if job_id is not None:
        names = Job.objects.filter(pk=job_id).values_list("cluster__name", flat=True)
    else:
        names = Cluster.objects.filter(pk=cluster_id).values_list("name", flat=True)
    return next(iter(names), "")


@shared_task(ignore_result=True, **RETRY)
def dispatch_start(job_id: int, attempt_key: str) -> bool:
    with timed("dispatch", _cluster_name(job_id=job_id)):
        return start_on_backend(job_id, attempt_key)


@shared_task(ignore_result=True)
def dispatch_starts(pairs: list) -> int:
    """A pass's starts in one message; a start the backend cannot take now is retried alone."""
    with timed("dispatch", _cluster_name(job_id=pairs[0][0]) if pairs else ""):
        return start_many_on_backend([(job_id, key) for job_id, key in pairs])


@shared_task(ignore_result=True, **RETRY)
def dispatch_stop(job_id: int, attempt_key: str, cancel: bool) -> None:
    with timed("dispatch", _cluster_name(job_id=job_id)):
        stop_on_backend(job_id, attempt_key, cancel)


@shared_task(ignore_result=True, **RETRY)
def mirror_drain(node_id: int) -> None:
    node = Node.objects.select_related("cluster").get(pk=node_id)
    backend = backend_for(node.cluster)
    if node.drained:
        backend.drain_node(node.name, node.drain_reason)
    else:
        backend.undrain_node(node.name)


# How long discovery asked for in the admin may take in a worker (ALLOT_DISCOVERY_TIMEOUT_S):
# a hanging backend (an ssh that never answers, an API server that accepts and says nothing,
# a backend option with a long timeout of its own) is cut off here, and the cluster says so.
DISCOVERY_TIMEOUT_S = settings.ALLOT_DISCOVERY_TIMEOUT_S


@shared_task(
    ignore_result=True,
    soft_time_limit=DISCOVERY_TIMEOUT_S,
    time_limit=DISCOVERY_TIMEOUT_S + 15,  # hard kill if the soft limit is ignored
)
def discover_cluster(cluster_id: int) -> str:
    """Discovery asked for in the admin: in a worker, with a time limit, never in the web
    process (its options reach other hosts and run commands)."""
    try:
        return discovery.discover_in_worker(cluster_id)
    except SoftTimeLimitExceeded:
        why = f"did not finish within {DISCOVERY_TIMEOUT_S} s"
        discovery.record_discovery_error(cluster_id, why)
        return why


@shared_task(ignore_result=True)
def sync_all() -> None:
    for cluster_id in Cluster.objects.values_list("pk", flat=True):
        sync_cluster.delay(cluster_id)


@shared_task(ignore_result=True)
def sync_cluster(cluster_id: int) -> None:
    with timed("reconcile", _cluster_name(cluster_id=cluster_id)) as outcome:
        # None: the backend could not be reached (recorded on the cluster): an error.
        outcome["error"] = reconcile.sync_cluster(cluster_id) is None


@shared_task(ignore_result=True)
def check_ledger_all() -> None:
    for cluster_id in Cluster.objects.values_list("pk", flat=True):
        check_ledger.delay(cluster_id)


@shared_task(ignore_result=True)
def check_ledger(cluster_id: int) -> int | None:
    """The periodic ledger check of one cluster: stored for /operations and /metrics, each
    difference logged; nothing repaired. The number of differences, None without an answer."""
    check = ledger_check.record_check(cluster_id)
    return None if check is None or check.error else check.differences


@shared_task(ignore_result=True)
def charge_usage() -> int:
    with timed("charge"):
        return charge_running_jobs()


@shared_task(ignore_result=True)
def read_gpu_telemetry() -> int:
    """GPU utilisation from ALLOT_GPU_TELEMETRY_URL (DCGM in Prometheus) for Slurm and
    Kubernetes jobs: idle jobs flagged, wasted GPU-hours counted, owners told."""
    with timed("telemetry") as outcome:
        try:
            return telemetry.read_and_record().read
        except telemetry.TelemetryError as exc:
            outcome["error"] = True
            logger.warning("GPU telemetry: %s", exc)
            return 0


@shared_task(ignore_result=True)
def demo_traffic() -> int:
    """Demo only (ALLOT_DEMO_TRAFFIC=1, set by rundemo): keep the simulated clusters busy."""
    return keep_demand()
