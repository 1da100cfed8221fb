"""The simulator and the live loop make the same decisions on the same small scenarios.

The live loop runs as in production — submit through the service, sync the simulated backend,
charge usage, ``scheduling.passes.run_pass`` and its dispatch — on the Django test database,
with the clock moved one pass interval at a time and a pass at every step. The simulator
replays the same trace and passes only at events and one interval after a pass that changed
something. Every start (with its nodes and funding) and every preemption must match, at the
same second: the passes the simulator skips are passes in which the live loop changes nothing.
"""

import datetime as dt

import pytest
import time_machine

from budgets import services as budget_services
from budgets.models import Role
from portal.celery import app as celery_app
from scheduling.accounting import charge_running_jobs
from scheduling.engine.sim import simulate
from scheduling.engine.sim.scenario import BudgetSpec, ClusterSpec, Scenario, TraceJob
from scheduling.models import Job
from scheduling.reconcile import sync_cluster
from scheduling.services import JobRequest, submit_job
from tests.budgets.factories import RoleFactory, UserFactory
from tests.scheduling.conftest import make_cluster

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)
STEP = 300  # the pass interval, in both
HOUR = 3600


def job(jid, submit, project, gpus, duration, min_runtime=600, resumable=True):
    user = project or "nobody"
    return TraceJob(
        jid, submit, project, user, gpus, duration, min_runtime, resumable, "batch", None
    )


SCENARIOS = {
    # funded work fills the cluster, more queues behind it, finishes free GPUs
    "queue": (
        [("a", 500), ("b", 500)],
        [
            job("a1", 0, "a", 8, 2 * HOUR),
            job("a2", 0, "a", 4, HOUR),
            job("b1", 0, "b", 8, HOUR),
            job("b2", 600, "b", 4, 3 * HOUR),
            job("a3", 900, "a", 8, HOUR),
        ],
    ),
    # funded work preempts unfunded work at once; the victims come back on what is left
    "unfunded": (
        [("a", 500)],
        [
            job("free1", 0, "", 8, 6 * HOUR),
            job("free2", 0, "", 4, 6 * HOUR),
            job("free3", 0, "", 4, 6 * HOUR),
            job("a1", 1200, "a", 2, HOUR),
            job("a2", 1500, "a", 8, 2 * HOUR),
        ],
    ),
    # fair share: an over-served project's unprotected jobs yield to an idle sibling's
    "standing": (
        [("a", 500), ("b", 500)],
        [
            job("a1", 0, "a", 8, 5 * HOUR, min_runtime=1800),
            job("a2", 0, "a", 8, 5 * HOUR, min_runtime=1800),
            job("a3", 300, "a", 8, 2 * HOUR, min_runtime=1800),
            job("b1", 3600, "b", 8, HOUR, min_runtime=1800),
            job("b2", 3600, "b", 4, HOUR, min_runtime=1800, resumable=False),
        ],
    ),
}


@pytest.fixture
def run_pass(django_capture_on_commit_callbacks, monkeypatch):
    """One live pass and its after-commit dispatch, run in-process as a worker would (the
    named task applied locally once the pass commits)."""
    from django.db import transaction

    import scheduling.tasks  # noqa: F401 - registers the tasks by name
    from scheduling import enqueue, passes

    def on_commit(task_name, *args):
        task = celery_app.tasks[task_name]
        transaction.on_commit(lambda: task.apply(args=args))

    monkeypatch.setattr(enqueue, "on_commit", on_commit)

    def run(cluster):
        with django_capture_on_commit_callbacks(execute=True):
            return passes.run_pass(cluster.pk)

    return run


def sim_decisions(budgets, jobs, horizon):
    sc = Scenario(
        window_days=7,
        gpu_types={"H100": 1.0},
        clusters=(ClusterSpec("jupiter", "H100", 2, 8),),
        budgets=tuple(BudgetSpec(p, h, h) for p, h in budgets),
    )
    res = simulate(sc, jobs, "fairshare", until_s=horizon, pass_interval_s=STEP)
    return sorted(
        (int(t), jid, event, nodes, funded)
        for t, _, _, jid, event, nodes, funded in res.events
        if event in ("start", "preempt") and t < horizon
    )


def live_decisions(tmp_path, run_pass, budgets, jobs, horizon):
    out = []
    with time_machine.travel(T0, tick=False) as clock:
        root = budget_services.create_root(None, "Org", "org")
        budget_services.set_grant(None, root, sum(h for _, h in budgets))
        users = {"": UserFactory(username="nobody")}
        for path, hours in budgets:
            node = budget_services.create_node(None, root, path, path)
            budget_services.set_grant(None, node, hours)
            users[path] = UserFactory(username=path)
            RoleFactory(user=users[path], role=Role.Kind.RESEARCHER, node=node)
        cluster = make_cluster(tmp_path, nodes=2, gpus=8)
        names = {}
        running: dict[int, tuple] = {}
        for t in range(0, int(horizon), STEP):
            clock.move_to(T0 + dt.timedelta(seconds=t))
            for j in sorted(jobs, key=lambda j: (j.submit_s, j.id)):
                if j.submit_s == t:
                    request = JobRequest(
                        name=j.id,
                        project=j.project,
                        cluster="jupiter",
                        gpus=j.gpus,
                        min_runtime_s=int(j.min_runtime_s),
                        resumable=j.resumable,
                        sim_duration_s=int(j.duration_s),
                    )
                    names[submit_job(users[j.project], request).pk] = j.id
            sync_cluster(cluster.pk)
            charge_running_jobs()
            before = {pk for pk, _ in running.items()}
            run_pass(cluster)
            now_running = {
                row.pk: row for row in Job.objects.filter(cluster=cluster, state=Job.State.RUNNING)
            }
            finished = set(
                Job.objects.filter(pk__in=before, state=Job.State.COMPLETED).values_list(
                    "pk", flat=True
                )
            )
            for pk in before - set(now_running) - finished:
                out.append((t, names[pk], "preempt", ";".join(running[pk][0]), ""))
            for pk, row in now_running.items():
                if pk not in running or running[pk][1] != row.started_at:
                    nodes = tuple(n for n, _ in row.nodes)
                    out.append((t, names[pk], "start", ";".join(nodes), str(row.funded).lower()))
            running = {
                pk: (tuple(n for n, _ in row.nodes), row.started_at)
                for pk, row in now_running.items()
            }
    return sorted(out)


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_simulator_and_the_live_loop_decide_the_same(name, tmp_path, run_pass):
    budgets, jobs = SCENARIOS[name]
    horizon = 6 * HOUR
    expected = live_decisions(tmp_path, run_pass, budgets, jobs, horizon)
    assert any(e[2] == "start" for e in expected)
    assert sim_decisions(budgets, jobs, horizon) == expected
