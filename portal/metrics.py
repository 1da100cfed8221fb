"""``GET /metrics``: Prometheus text format (ARCHITECTURE.md, Operations).

Open on loopback; from anywhere else only with ``Authorization: Bearer $ALLOT_METRICS_TOKEN``.
The numbers come from the database, not from counters kept in the web process: the web runs in
several processes (gunicorn workers) that see none of what the Celery workers do, so a
custom collector reads a fixed number of aggregate queries (fourteen, whatever the number of
jobs or nodes; a test pins it) and the rendered answer is kept ``ALLOT_METRICS_CACHE_S``
seconds (15: Prometheus's usual scrape interval), so scrapes from two Prometheus replicas, or a
dashboard's refresh, cost the database nothing more. The latency histograms are written by
the workers into ``OperationStat`` (scheduling/opstats.py).
"""

from __future__ import annotations

import hmac
import ipaddress
import threading
import time
from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, Min, OuterRef, Q, Subquery, Sum
from django.http import HttpResponse
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

IDLE_AFTER_S = 3600  # as scheduling.reports.IDLE_AFTER: the pages and the metric agree

_cache_lock = threading.Lock()
_cache: dict = {"at": 0.0, "body": b""}


def _hours(cost_gpu_seconds) -> float:
    return float(cost_gpu_seconds or 0) / 3600


def _cluster_families(now: datetime):
    from scheduling.models import Cluster, Job, JobEvent, Node
    from scheduling.reports import CAUSES

    # The last ledger check (LedgerCheck, one row per cluster) is joined here, not read by a
    # query of its own.
    clusters = list(
        Cluster.objects.order_by("name").values_list(
            "pk",
            "name",
            "reachable",
            "last_pass_at",
            "last_sync_at",
            "ledger_check__checked_at",
            "ledger_check__differences",
            "ledger_check__gap_gpu_seconds",
        )
    )
    names = {pk: name for pk, name, *_ in clusters}
    reachable = GaugeMetricFamily(
        "allot_cluster_reachable", "1 when the backend answered its last sync", labels=["cluster"]
    )
    pass_age = GaugeMetricFamily(
        "allot_last_pass_age_seconds", "Seconds since the last scheduling pass", labels=["cluster"]
    )
    sync_age = GaugeMetricFamily(
        "allot_last_sync_age_seconds", "Seconds since the last backend sync", labels=["cluster"]
    )
    ledger_gap = GaugeMetricFamily(
        "allot_ledger_discrepancy_gpu_hours",
        "GPU-hours between what Allot charged and the backend's record, summed over the "
        "attempts of the last ledger check's window that differ",
        labels=["cluster"],
    )
    ledger_differences = GaugeMetricFamily(
        "allot_ledger_differences",
        "Attempts whose charges differ from the backend's record (last ledger check)",
        labels=["cluster"],
    )
    ledger_age = GaugeMetricFamily(
        "allot_ledger_check_age_seconds",
        "Seconds since the last ledger check the backend answered",
        labels=["cluster"],
    )
    for _, name, ok, last_pass, last_sync, checked, n_differences, gap in clusters:
        reachable.add_metric([name], 1.0 if ok else 0.0)
        if last_pass:
            pass_age.add_metric([name], (now - last_pass).total_seconds())
        if last_sync:
            sync_age.add_metric([name], (now - last_sync).total_seconds())
        if checked:  # never checked: no series, rather than a 0 nobody measured
            ledger_gap.add_metric([name], _hours(gap))
            ledger_differences.add_metric([name], n_differences)
            ledger_age.add_metric([name], (now - checked).total_seconds())
    yield from (reachable, pass_age, sync_age, ledger_gap, ledger_differences, ledger_age)

    # GPUs by state: busy (running jobs), drained (free GPUs on drained nodes), idle (the rest).
    nodes = {}
    total: dict[int, int] = defaultdict(int)
    for cluster_id, name, gpus, drained in Node.objects.filter(present=True).values_list(
        "cluster_id", "name", "gpus", "drained"
    ):
        nodes[(cluster_id, name)] = [gpus, drained, 0]
        total[cluster_id] += gpus
    busy: dict[int, int] = defaultdict(int)
    running_gpus = GaugeMetricFamily(
        "allot_running_gpus", "GPUs held by running jobs", labels=["cluster", "funded"]
    )
    by_funding: dict[tuple[int, bool], int] = defaultdict(int)
    for cluster_id, gpus, funded, placed in Job.objects.for_occupancy():
        busy[cluster_id] += gpus
        by_funding[(cluster_id, bool(funded))] += gpus
        for node_name, node_gpus in placed or []:
            if (cluster_id, node_name) in nodes:
                nodes[(cluster_id, node_name)][2] += node_gpus
    drained: dict[int, int] = defaultdict(int)
    for (cluster_id, _), (gpus, is_drained, used) in nodes.items():
        if is_drained:
            drained[cluster_id] += max(0, gpus - used)
    gpus_family = GaugeMetricFamily(
        "allot_gpus", "GPUs by state: busy, idle (free) or drained", labels=["cluster", "state"]
    )
    for pk, name in names.items():
        gpus_family.add_metric([name, "busy"], busy[pk])
        gpus_family.add_metric([name, "drained"], drained[pk])
        gpus_family.add_metric([name, "idle"], max(0, total[pk] - busy[pk] - drained[pk]))
        for funded in (True, False):
            running_gpus.add_metric([name, str(funded).lower()], by_funding[(pk, funded)])
    yield from (gpus_family, running_gpus)

    jobs = GaugeMetricFamily("allot_jobs", "Jobs by state", labels=["cluster", "state"])
    oldest = GaugeMetricFamily(
        "allot_oldest_pending_seconds",
        "How long the oldest waiting job has waited since it was submitted",
        labels=["cluster"],
    )
    idle = GaugeMetricFamily(
        "allot_idle_jobs",
        "Running jobs under 10 % GPU utilisation for over an hour",
        labels=["cluster"],
    )
    idle_since = now - timedelta(seconds=IDLE_AFTER_S)
    rows = (
        Job.objects.values_list("cluster_id", "state")
        .annotate(
            n=Count("pk"),
            first=Min("submitted_at"),
            idle=Count("pk", filter=Q(low_utilization_since__lt=idle_since)),
        )
        .order_by()
    )
    seen = set()
    for cluster_id, state, n, first, idle_n in rows:
        if cluster_id not in names:  # created since the first query of this collection
            continue
        jobs.add_metric([names[cluster_id], state], n)
        seen.add((cluster_id, state))
        if state == "pending" and first:
            oldest.add_metric([names[cluster_id]], (now - first).total_seconds())
        if state == "running":
            idle.add_metric([names[cluster_id]], idle_n)
    for pk, name in names.items():
        for state in ("pending", "running"):
            if (pk, state) not in seen:
                jobs.add_metric([name, state], 0)
    yield from (jobs, oldest, idle)

    queue = GaugeMetricFamily(
        "allot_queue_jobs", "Waiting jobs by pending reason", labels=["cluster", "reason"]
    )
    for cluster_id, code, n in (
        Job.objects.pending().values_list("cluster_id", "pending_code").annotate(n=Count("pk"))
    ).order_by():
        if cluster_id in names:
            queue.add_metric([names[cluster_id], code or "None"], n)
    yield queue

    preemptions = CounterMetricFamily(
        "allot_preemptions",
        "Preemptions by cause: after_protection, unfunded, drain or other",
        labels=["cluster", "reason"],
    )
    # The work those preemptions cost (scheduling/preemption_cost.py), over a day and a week,
    # read by the same query.
    windows = {"1d": now - timedelta(days=1), "7d": now - timedelta(days=7)}
    rows = (
        JobEvent.objects.filter(kind="preempted")
        .values_list("job__cluster_id")
        .annotate(
            n=Count("pk"),
            **{c: Count("pk", filter=q) for c, q in CAUSES.items()},
            **{
                f"lost_{w}": Sum("lost_gpu_seconds", filter=Q(at__gte=since))
                for w, since in windows.items()
            },
        )
        .order_by()
    )
    # Every cluster × cause, zero included: a rate() over a series that appears only at the
    # first preemption misses that preemption.
    counts = {pk: dict.fromkeys([*CAUSES, "other"], 0) for pk in names}
    lost = {pk: dict.fromkeys(windows, 0) for pk in names}
    for cluster_id, n, *rest in rows:
        if cluster_id not in counts:
            continue
        by_cause, by_window = rest[: len(CAUSES)], rest[len(CAUSES) :]
        counts[cluster_id].update(zip(CAUSES, by_cause, strict=True))
        counts[cluster_id]["other"] = n - sum(by_cause)
        lost[cluster_id].update(zip(windows, (s or 0 for s in by_window), strict=True))
    for pk, by_reason in counts.items():
        for reason, count in by_reason.items():
            preemptions.add_metric([names[pk], reason], count)
    lost_family = GaugeMetricFamily(
        "allot_preemption_lost_gpu_hours",
        "GPU-hours of work lost to preemptions in the window (1d, 7d), by the cost model: "
        "a whole run if not resumable, else the work since its last checkpoint plus a restart",
        labels=["cluster", "window"],
    )
    for pk, by_window in lost.items():
        for window, seconds in by_window.items():
            lost_family.add_metric([names[pk], window], seconds / 3600)
    yield from (preemptions, lost_family)

    # The most preemptions one job had in the last week: one job preempted again and again
    # is the instability a total hides. The per-job counts are grouped in the database and
    # only their maximum per cluster comes back (one query, one row per cluster).
    per_job = (
        JobEvent.objects.filter(
            kind="preempted", at__gte=windows["7d"], job__cluster_id=OuterRef("pk")
        )
        .values("job_id")
        .annotate(n=Count("pk"))
        .order_by("-n")
        .values("n")[:1]
    )
    most = GaugeMetricFamily(
        "allot_job_preemptions_max",
        "The most preemptions any one job had in the last 7 days",
        labels=["cluster"],
    )
    for pk, n in Cluster.objects.annotate(n=Subquery(per_job)).values_list("pk", "n"):
        if pk in names:
            most.add_metric([names[pk]], n or 0)
    yield most


def _budget_families(now: datetime):
    from budgets.balances import _rolled_up, burn_by_path, tree_stats
    from budgets.models import UsageEntry
    from scheduling.models import Job

    stats = tree_stats()
    burn = burn_by_path(now)
    charged = _rolled_up(
        UsageEntry.objects.values_list("node__path").annotate(t=Sum("cost_gpu_seconds")).order_by()
    )
    wasted = _rolled_up(
        Job.objects.filter(wasted_gpu_seconds__gt=0, project__isnull=False)
        .values_list("project__path")
        .annotate(t=Sum("wasted_gpu_seconds"))
        .order_by()
    )
    remaining = GaugeMetricFamily(
        "allot_budget_remaining_gpu_hours",
        "Grant minus usage and open liens this period (cost-normalised GPU-hours)",
        labels=["path"],
    )
    grant = GaugeMetricFamily(
        "allot_budget_grant_gpu_hours", "Grant in force this period", labels=["path"]
    )
    used = GaugeMetricFamily(
        "allot_budget_used_gpu_hours", "GPU-hours charged this period", labels=["path"]
    )
    burn_rate = GaugeMetricFamily(
        "allot_budget_burn_gpu_hours_per_hour",
        "GPU-hours charged over the last 24 hours, per hour",
        labels=["path"],
    )
    charged_total = CounterMetricFamily(
        "allot_charged_gpu_hours",
        "GPU-hours ever charged to the node and its descendants (reversals net out)",
        labels=["path"],
    )
    wasted_total = CounterMetricFamily(
        "allot_wasted_gpu_hours",
        "GPU-hours held by jobs below the idle threshold, from GPU telemetry",
        labels=["path"],
    )
    for s in stats.values():
        path = s.node.slug_path or s.node.name
        remaining.add_metric([path], float(s.remaining_gpu_hours))
        grant.add_metric([path], float(s.grant_gpu_hours))
        used.add_metric([path], float(s.used_gpu_hours))
        burn_rate.add_metric([path], _hours(burn.get(s.node.path, 0)) / 24)
        charged_total.add_metric([path], _hours(charged.get(s.node.path, 0)))
        wasted_total.add_metric([path], wasted.get(s.node.path, 0) / 3600)
    yield from (remaining, grant, used, burn_rate, charged_total, wasted_total)


def _histogram_families():
    from scheduling.opstats import OPERATIONS, histograms

    families = {
        op: HistogramMetricFamily(
            f"allot_{op}_duration_seconds",
            f"Duration of each {op} (written by the workers)",
            labels=["cluster"],
        )
        for op in OPERATIONS
    }
    errors = CounterMetricFamily(
        "allot_operation_errors",
        "Operations that failed (a backend refusal or outage, an exception)",
        labels=["operation", "cluster"],
    )
    for (op, cluster), h in histograms().items():
        if op not in families:
            continue
        buckets = [(repr(le), count) for le, count in h["buckets"]] + [("+Inf", h["count"])]
        families[op].add_metric([cluster], buckets, h["sum"])
        errors.add_metric([op, cluster], h["errors"])
    yield from families.values()
    yield errors


class AllotCollector:
    """Everything ``/metrics`` shows, read from the database at collect time."""

    def collect(self):
        now = timezone.now()
        started = time.perf_counter()
        yield from _cluster_families(now)
        yield from _budget_families(now)
        yield from _histogram_families()
        scrape = GaugeMetricFamily(
            "allot_metrics_collect_seconds", "Time spent reading the database for this answer"
        )
        scrape.add_metric([], time.perf_counter() - started)
        yield scrape


def render() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AllotCollector())
    return generate_latest(registry)


def cached_render() -> bytes:
    ttl = settings.ALLOT_METRICS_CACHE_S
    with _cache_lock:  # one collection at a time per process; the others wait for its answer
        if ttl <= 0 or time.monotonic() - _cache["at"] >= ttl or not _cache["body"]:
            _cache["body"] = render()
            _cache["at"] = time.monotonic()
        return _cache["body"]


FORWARDED = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP")


def _from_loopback(request) -> bool:
    # A reverse proxy on the same host makes every request arrive from loopback, whether or
    # not ALLOT_BEHIND_PROXY is set: a request that names a forwarded client is not local.
    # (A local client adding the header only loses its own access.)
    if any(request.META.get(header) for header in FORWARDED):
        return False
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


def _token_ok(request) -> bool:
    expected = settings.ALLOT_METRICS_TOKEN
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if not expected or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer ") :].strip().encode(), expected.encode())


def metrics_view(request):
    if not (_from_loopback(request) or _token_ok(request)):
        if not settings.ALLOT_METRICS_TOKEN:
            return HttpResponse(
                "metrics are open on loopback only; set ALLOT_METRICS_TOKEN to scrape from "
                "elsewhere\n",
                status=403,
                content_type="text/plain",
            )
        response = HttpResponse("bearer token required\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="allot-metrics"'
        return response
    return HttpResponse(cached_render(), content_type=CONTENT_TYPE_PLAIN_0_0_4)
