"""The organisation's own recent workload, as the simulator's scenario and trace.

``export_workload(weeks, as_of)`` reads the records — jobs submitted in the last ``weeks``
before ``as_of``, the clusters, the GPU types and the budget tree with the grants in force —
and returns a ``Workload``: the scenario as a mapping (the YAML of ARCHITECTURE.md) and the
trace rows (its CSV). ``write`` puts both in a folder that ``manage.py simulate`` replays.

What each job contributes (its ``duration_s``, the work it needs):

1. finished by ``as_of`` (completed, failed, or cancelled after it ran): the work it really
   did — all its runs if it is resumable, its last run if it starts over;
2. running at ``as_of``: the work so far (elapsed, plus earlier runs if resumable);
3. waiting at ``as_of`` (pending, or requeued after a preemption): the work it declared — its
   ``sim_duration_s`` on a simulated cluster — or, where nothing declares it, its minimum
   runtime;
4. cancelled before it ever ran: left out (it used nothing).

Grants are per budget period (a quarter or a month) and the simulator renews every grant
each fair-share window, so each grant is pro-rated to the window (7/92 of a quarter's); every
node's share is written out as the portal computes it (its weight, or its grant), so the
fair-share order is the live loop's to the last digit. Jobs whose project is archived run
unfunded in the replay, as they would now.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import yaml
from django.conf import settings
from django.db.models import Q

from budgets.balances import tree_stats
from budgets.models import GpuType
from budgets.periods import BudgetPeriod
from scheduling.engine.sim.scenario import TRACE_COLUMNS
from scheduling.models import Cluster, Job

S = Job.State


@dataclass(frozen=True)
class Workload:
    scenario: dict
    trace: tuple[tuple, ...]  # rows in TRACE_COLUMNS order
    as_of: dt.datetime
    start: dt.datetime  # submit_s counts from here
    grants: dict[str, float]  # path -> GPU-hours in force this period (not pro-rated)
    weights: dict[str, float]  # path -> explicit weight, where one overrides the grant
    per_window: float  # the factor that turns a period's grant into a window's

    @property
    def horizon_s(self) -> float:
        """The span the records cover: the replay stops here, at ``as_of``, so what it
        delivers is what these grants would have delivered over those weeks."""
        return _seconds(self.as_of - self.start)

    def trace_csv(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(TRACE_COLUMNS)
        writer.writerows(self.trace)
        return out.getvalue()

    def scenario_yaml(self) -> str:
        return yaml.safe_dump(self.scenario, sort_keys=False)

    def digest(self) -> str:
        """What identifies the workload and the current grants: equal digests replay alike."""
        h = hashlib.sha256(f"{self.horizon_s}\n".encode())
        h.update(self.scenario_yaml().encode())
        h.update(self.trace_csv().encode())
        return h.hexdigest()

    def write(self, folder: str | Path) -> tuple[Path, Path]:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        scenario, trace = folder / "scenario.yaml", folder / "trace.csv"
        scenario.write_text(self.scenario_yaml(), encoding="utf-8")
        trace.write_text(self.trace_csv(), encoding="utf-8")
        return scenario, trace

    def to_json(self) -> str:
        return json.dumps({"scenario": self.scenario, "trace": self.trace_csv()})


def _seconds(delta: dt.timedelta) -> float:
    return round(delta.total_seconds(), 6)


def _duration(job: Job, as_of: dt.datetime) -> float | None:
    """The work ``job`` contributes (see the module docstring), or None to leave it out."""
    ran = job.started_at is not None and job.started_at <= as_of
    ended = job.ended_at is not None and job.ended_at <= as_of
    if job.state in Job.TERMINAL and ended:
        if job.first_started_at is None:
            return None  # cancelled while it waited: it used nothing
        if job.resumable:
            return float(job.run_seconds_done)
        return _seconds(job.ended_at - job.started_at) if job.started_at else 0.0
    if ran and (job.state == S.RUNNING or job.ended_at is None or job.ended_at > as_of):
        # running at as_of: elapsed so far (ended after as_of counts only up to it)
        elapsed = _seconds(as_of - job.started_at)
        if not job.resumable:
            return elapsed
        earlier = job.run_seconds_done
        if job.state != S.RUNNING and job.ended_at is not None:
            earlier -= _seconds(job.ended_at - job.started_at)  # the last run is in the total
        return max(0.0, earlier) + elapsed
    if job.sim_duration_s:
        return float(job.sim_duration_s)
    return float(job.min_runtime_s)


def current_tree(as_of: dt.datetime) -> tuple[dict[str, float], dict[str, float]]:
    return _tree(BudgetPeriod.current(as_of))


def _tree(period: BudgetPeriod):
    """(grants by path, weights by path) of the active nodes below the root."""
    stats = [s for s in tree_stats(period).values() if s.node.depth > 1]
    grants = {s.node.slug_path: float(s.grant_gpu_hours) for s in stats}
    weights = {s.node.slug_path: float(s.node.weight) for s in stats if s.node.weight is not None}
    return grants, weights


def budget_mappings(
    grants: dict[str, float], weights: dict[str, float], per_window: float
) -> list[dict]:
    """The scenario's ``budgets`` list for these grants (paths, parents before children)."""
    top: list[dict] = []
    by_path: dict[str, dict] = {}
    for path in sorted(grants, key=lambda p: (p.count("/"), p)):
        parent, _, name = path.rpartition("/")
        grant = grants[path]
        entry = {
            "name": name,
            "gpu_hours": grant * per_window,
            "share": weights.get(path, grant),
        }
        by_path[path] = entry
        if parent:
            by_path[parent].setdefault("children", []).append(entry)
        else:
            top.append(entry)
    return top


def _clusters() -> tuple[list[dict], dict[str, int]]:
    """One scenario cluster per portal cluster: its present nodes, counted; GPUs per node is
    the most common count (the scenario's clusters are uniform)."""
    out, pools = [], {}
    for cluster in Cluster.objects.prefetch_related("nodes").order_by("name"):
        nodes = [n for n in cluster.nodes.all() if n.present]
        if not nodes:
            continue
        sizes = [n.gpus for n in nodes]
        per_node = max(set(sizes), key=lambda g: (sizes.count(g), g))
        types = [n.gpu_type for n in nodes]
        gpu_type = max(set(types), key=lambda t: (types.count(t), t))
        out.append(
            {"name": cluster.name, "gpu_type": gpu_type, "nodes": len(nodes),
             "gpus_per_node": per_node}
        )  # fmt: skip
        pools[cluster.name] = cluster.interactive_pool_gpus
    return out, pools


def _trace(since: dt.datetime, as_of: dt.datetime, paths: set[str]):
    jobs = (
        Job.objects.filter(submitted_at__gte=since, submitted_at__lt=as_of)
        .filter(~Q(state=S.CANCELLED) | Q(first_started_at__isnull=False))
        .select_related("owner", "cluster", "project")
        .only(
            "pk", "state", "submitted_at", "started_at", "first_started_at", "ended_at",
            "gpus", "min_runtime_s", "resumable", "kind", "sim_duration_s", "run_seconds_done",
            "owner__username", "cluster__name", "project__slug_path", "project__archived",
        )
        .order_by("submitted_at", "pk")
    )  # fmt: skip
    rows, start = [], None
    for job in jobs.iterator(chunk_size=2000):
        work = _duration(job, as_of)
        if work is None:
            continue
        start = start or job.submitted_at
        project = job.project.slug_path if job.project_id else ""
        rows.append(
            (
                str(job.pk),
                _seconds(job.submitted_at - start),
                project if project in paths else "",
                job.owner.username,
                job.gpus,
                work,
                job.min_runtime_s,
                "true" if job.resumable else "false",
                job.kind,
                job.cluster.name,
            )
        )
    return tuple(rows), start or as_of


def export_workload(weeks: float, as_of: dt.datetime) -> Workload:
    period = BudgetPeriod.current(as_of)
    window_days = settings.ALLOT_FAIRSHARE_WINDOW_DAYS
    per_window = window_days * 24 / period.hours
    grants, weights = _tree(period)
    clusters, pools = _clusters()
    gpu_types = {
        name: float(Decimal(factor))
        for name, factor in GpuType.objects.order_by("name").values_list("name", "cost_factor")
    }
    for c in clusters:
        gpu_types.setdefault(c["gpu_type"], 1.0)
    trace, start = _trace(as_of - dt.timedelta(weeks=weeks), as_of, set(grants))
    scenario = {
        "window_days": window_days,
        "gpu_types": gpu_types,
        "clusters": clusters,
        "budgets": budget_mappings(grants, weights, per_window),
        "interactive": {"pool_gpus": pools},
    }
    return Workload(scenario, trace, as_of, start, grants, weights, per_window)
