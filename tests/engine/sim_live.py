"""Drive one small scenario through the live loop and through the simulator, and list the
decisions each made, in the same shape: ``(t_s, job, event, nodes, funded)`` for every start,
preemption and finish before the horizon.

The live side runs as in production, on the Django test database: jobs are submitted through
the service, each cluster's simulated backend is synced (finishes are noticed there), usage is
charged, and ``scheduling.passes.run_pass`` runs with its after-commit dispatch applied in
process, once per cluster every ``step_s`` of a controlled clock. Its decisions are read back
from the jobs' timelines (``JobEvent``), which is what the portal shows.

The simulator replays the same trace with ``pass_interval_s = step_s``. Both sides see the
same job ids (the live loop's primary keys), because the engine breaks ties by id.

Times agree exactly when every input lies on the pass grid (submit times, durations, minimum
runtimes that are multiples of ``step_s``): every event then happens at a pass time on both
sides. ``step_s`` = 360 also keeps every charge a multiple of 0.1 GPU-hour, so the portal's
balances (rounded to 0.01 GPU-hour) are exact and funding decisions cannot differ by rounding.
"""

from __future__ import annotations

import datetime as dt
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import time_machine

from budgets import services as budget_services
from budgets.models import Role
from scheduling.accounting import charge_running_jobs
from scheduling.engine.sim import simulate
from scheduling.engine.sim.scenario import BudgetSpec, ClusterSpec, Scenario, TraceJob
from scheduling.models import Job, JobEvent
from scheduling.reconcile import sync_cluster
from scheduling.services import JobRequest, submit_job
from tests.budgets.factories import RoleFactory, UserFactory
from tests.scheduling.conftest import make_cluster

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)
STEP = 360  # the pass interval, in both
HOUR = 3600
NOBODY = "nobody"  # the submitter of unfunded work

Event = tuple[int, str, str, str, str]


@dataclass(frozen=True)
class Case:
    """A scenario small enough for the live loop: clusters, a budget tree (paths with their
    GPU-hours, parents before children), a trace whose jobs each name their cluster."""

    clusters: tuple[ClusterSpec, ...]
    gpu_types: dict[str, float]
    budgets: tuple[tuple[str, int], ...]
    jobs: tuple[TraceJob, ...]
    horizon_s: int
    step_s: int = STEP

    def scenario(self) -> Scenario:
        return Scenario(
            window_days=7,
            gpu_types=dict(self.gpu_types),
            clusters=self.clusters,
            budgets=tuple(BudgetSpec(p, h, h) for p, h in self.budgets),
        )


def describe(case: Case) -> str:
    """The case as the Python that builds it, to paste into a named scenario."""
    lines = [f"clusters={case.clusters!r}", f"budgets={case.budgets!r}", "jobs=["]
    for j in case.jobs:
        lines.append(
            f"    job({j.id!r}, {j.submit_s}, {j.project!r}, {j.gpus}, {j.duration_s}, "
            f"min_runtime={j.min_runtime_s}, resumable={j.resumable}, cluster={j.cluster!r}, "
            f"user={j.user!r}),"
        )
    return "\n".join(lines + ["]"])


def job(
    jid, submit, project, gpus, duration, min_runtime=600, resumable=True, cluster="jupiter",
    user=None,
):  # fmt: skip
    user = user or (project.replace("/", "-") if project else NOBODY)
    return TraceJob(
        jid, submit, project, user, gpus, duration, min_runtime, resumable, "batch", cluster
    )


def sim_events(case: Case, ids: dict[str, str]) -> list[Event]:
    """The simulator's decisions, its jobs renamed to ``ids`` (trace id -> live id)."""
    back = {v: k for k, v in ids.items()}
    jobs = [replace(j, id=ids[j.id]) for j in case.jobs]
    res = simulate(
        case.scenario(), jobs, "fairshare", until_s=case.horizon_s, pass_interval_s=case.step_s
    )
    return sorted(
        (int(t), back[jid], event, nodes, funded)
        for t, _, _, jid, event, nodes, funded in res.events
        if event != "submit" and t < case.horizon_s
    )


class LiveLoop:
    """One organisation, its clusters and users, and a clock moved one pass at a time. Run
    it inside a transaction the caller rolls back."""

    def __init__(self, case: Case, run_pass, tmp: Path | None = None):
        self.case, self.run_pass = case, run_pass
        self.tmp = tmp or Path(tempfile.mkdtemp(prefix="allot-diff-"))
        self.ids: dict[str, str] = {}  # trace id -> job pk, as a string

    def _organise(self) -> None:
        root = budget_services.create_root(None, "Org", "org")
        tops = [(p, h) for p, h in self.case.budgets if "/" not in p]
        budget_services.set_grant(None, root, sum(h for _, h in tops))
        nodes = {}
        for path, hours in self.case.budgets:  # parents first: a child's grant fits in it
            parent, _, slug = path.rpartition("/")
            nodes[path] = budget_services.create_node(None, nodes.get(parent, root), slug, slug)
            budget_services.set_grant(None, nodes[path], hours)
        self.users, members = {}, set()
        for j in self.case.jobs:
            if j.user not in self.users:
                self.users[j.user] = UserFactory(username=j.user)
            if j.project and (j.user, j.project) not in members:
                members.add((j.user, j.project))
                user, node = self.users[j.user], nodes[j.project]
                RoleFactory(user=user, role=Role.Kind.RESEARCHER, node=node)
        self.clusters = [
            make_cluster(
                self.tmp,
                name=c.name,
                nodes=c.nodes,
                gpus=c.gpus_per_node,
                gpu_type=c.gpu_type,
                factor=f"{self.case.gpu_types[c.gpu_type]:.3f}",
            )
            for c in self.case.clusters
        ]

    def _submit(self, j: TraceJob) -> None:
        request = JobRequest(
            name=j.id,
            project=j.project,
            cluster=j.cluster,
            gpus=j.gpus,
            min_runtime_s=int(j.min_runtime_s),
            resumable=j.resumable,
            sim_duration_s=int(j.duration_s),
        )
        self.ids[j.id] = str(submit_job(self.users[j.user], request).pk)

    def run(self) -> list[Event]:
        case = self.case
        trace = sorted(case.jobs, key=lambda j: j.submit_s)  # stable: ties in trace order
        with time_machine.travel(T0, tick=False) as clock:
            self._organise()
            for t in range(0, case.horizon_s, case.step_s):
                clock.move_to(T0 + dt.timedelta(seconds=t))
                for j in trace:
                    if j.submit_s == t:
                        self._submit(j)
                for cluster in self.clusters:
                    sync_cluster(cluster.pk)
                charge_running_jobs()
                for cluster in self.clusters:
                    self.run_pass(cluster)
                if self._quiet(t):
                    break  # nothing waits, runs or is still to come: no pass decides again
        return self.events()

    def _quiet(self, t: int) -> bool:
        if any(j.submit_s > t for j in self.case.jobs):
            return False
        live = [Job.State.PENDING, Job.State.RUNNING, Job.State.PREEMPTED]
        return not Job.objects.filter(state__in=live).exists()

    def events(self) -> list[Event]:
        back = {int(v): k for k, v in self.ids.items()}
        out, nodes = [], {}
        rows = JobEvent.objects.filter(
            job_id__in=back, kind__in=["running", "preempted", "completed"]
        )
        for pk, kind, at, where, message in rows.order_by("at", "id").values_list(
            "job_id", "kind", "at", "nodes", "message"
        ):
            t = int((at - T0).total_seconds())
            if kind == Job.State.RUNNING:
                nodes[pk] = ";".join(where)
                funded = "false" if message.endswith("(unfunded)") else "true"
                out.append((t, back[pk], "start", nodes[pk], funded))
            else:
                event = "preempt" if kind == Job.State.PREEMPTED else "finish"
                out.append((t, back[pk], event, nodes[pk], ""))
        return sorted(e for e in out if e[0] < self.case.horizon_s)


def make_run_pass(capture, monkeypatch):
    """One live pass and its after-commit dispatch, run in-process as a worker would (the
    named task applied locally once the pass commits). ``capture`` is pytest-django's
    ``django_capture_on_commit_callbacks``."""
    from django.db import transaction

    import scheduling.tasks  # noqa: F401 - registers the tasks by name
    from portal.celery import app as celery_app
    from scheduling import enqueue, passes

    def on_commit(task_name, *args):
        task = celery_app.tasks[task_name]
        transaction.on_commit(lambda: task.apply(args=args))

    monkeypatch.setattr(enqueue, "on_commit", on_commit)

    def run(cluster):
        with capture(execute=True):
            return passes.run_pass(cluster.pk)

    return run
