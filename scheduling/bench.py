"""The live-loop benchmark's scenario and clocks (``manage.py bench_live``, ``bench_pass``).

The passes are timed through ``scheduling.passes.run_pass``, the code the pass task runs:
snapshot, engine, decisions written, commit. Dispatch is not timed (it runs after commit, in
other tasks): the benchmark points Celery at an in-memory broker, so the enqueues cost what
serialising them costs and no worker, nor a shared Redis, ever sees the benchmark's tasks.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import random
import statistics
import time
from collections.abc import Iterator

from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import override_settings
from django.urls import reverse
from django.utils import timezone

from budgets.access import user_projects
from budgets.models import Role
from scheduling.discovery import register_cluster
from scheduling.models import Cluster, Job, JobEvent
from scheduling.passes import PassResult, run_pass
from scheduling.services import cancel_job

SIZES = [1, 1, 2, 2, 4, 4, 8, 8, 16]  # the benchmark's backlog: jobs of 1 to 16 GPUs
MIN_RUNTIMES = [1800, 3600, 3600, 7200, 14400]
NAMES = ["pretrain", "sweep", "eval", "finetune", "ablation"]


@contextlib.contextmanager
def offline_broker() -> Iterator[None]:
    """Enqueue dispatch tasks into an in-memory broker for the benchmark's duration."""
    from portal.celery import app

    keys = ("broker_url", "task_always_eager", "task_ignore_result")
    saved = {key: app.conf[key] for key in keys}
    app.conf.update(broker_url="memory://", task_always_eager=False, task_ignore_result=True)
    _forget_connections(app)
    try:
        yield
    finally:
        app.conf.update(saved)
        _forget_connections(app)


def _forget_connections(app) -> None:
    """Let the next enqueue connect to the configured broker (what Celery does after a fork;
    kombu's pools stay open for whoever still uses them)."""
    app._pool = None
    if "amqp" in app.__dict__:
        app.amqp._producer_pool = None


@contextlib.contextmanager
def production_settings() -> Iterator[None]:
    """Time as production runs: with DEBUG off, Django keeps no log of every query (with
    DEBUG on, formatting each statement's SQL for the log is part of what a clock sees)."""
    with override_settings(DEBUG=False):
        yield


class QueryCounter:
    """Counts statements through ``connection.execute_wrapper``: no SQL is formatted."""

    def __init__(self):
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)

    @contextlib.contextmanager
    def counting(self) -> Iterator[QueryCounter]:
        self.count = 0
        with connection.execute_wrapper(self):
            yield self


def timed_pass(cluster_id: int) -> tuple[float, PassResult, int]:
    """One live pass: milliseconds, its result and the number of SQL statements it ran."""
    with QueryCounter().counting() as queries:
        began = time.perf_counter()
        result = run_pass(cluster_id)
        elapsed = (time.perf_counter() - began) * 1000
    return elapsed, result, queries.count


def median(values: list[float]) -> float:
    return round(statistics.median(values), 1)


def free_cluster_name(base: str = "bench") -> str:
    taken = set(Cluster.objects.filter(name__startswith=base).values_list("name", flat=True))
    index = 1
    name = base
    while name in taken:
        index += 1
        name = f"{base}-{index}"
    return name


def make_cluster(name: str, nodes: int) -> Cluster:
    options = {"nodes": str(nodes), "gpus_per_node": "8", "gpu_type": "H100", "speed": "1"}
    return register_cluster(name, "simulated", options).cluster


def _researchers() -> list[tuple[object, list[int]]]:
    """The demo's researchers, each with the projects they may submit to."""
    people = sorted(
        {r.user for r in Role.objects.filter(role=Role.Kind.RESEARCHER).select_related("user")},
        key=lambda u: u.username,
    )
    return [(p, list(user_projects(p).values_list("pk", flat=True))) for p in people]


def submit_backlog(cluster: Cluster, count: int, seed: int = 12) -> int:
    """``count`` pending jobs as ``services.submit_job`` writes them (the job and its
    ``submitted`` event), in bulk: submitting 5,000 one by one would time the setup, not
    the pass. One in five is unfunded, as in the demo."""
    rng = random.Random(seed)
    people = _researchers()
    start = timezone.now() - dt.timedelta(hours=1)
    jobs = []
    for index in range(count):
        person, projects = rng.choice(people)
        jobs.append(
            Job(
                name=f"{rng.choice(NAMES)}-{index}",
                owner=person,
                project_id=None if rng.random() < 0.2 or not projects else rng.choice(projects),
                cluster=cluster,
                gpus=rng.choice(SIZES),
                min_runtime_s=rng.choice(MIN_RUNTIMES),
                sim_duration_s=rng.randint(3600, 6 * 3600),
                command="python train.py",
                submitted_at=start + dt.timedelta(milliseconds=500 * index),
                pending_code="New",
                pending_message="Waiting for the next scheduling pass.",
            )
        )
    created = Job.objects.bulk_create(jobs, batch_size=1000)
    JobEvent.objects.bulk_create(
        [
            JobEvent(job=j, at=j.submitted_at, kind="submitted", message=f"{j.gpus} GPUs")
            for j in created
        ],
        batch_size=1000,
    )
    return len(created)


def add_history(cluster: Cluster, count: int, seed: int = 13) -> int:
    """``count`` finished jobs over the last 90 days, for the pages' 100k-job case."""
    rng = random.Random(seed)
    people = _researchers()
    now = timezone.now()
    rows = []
    for index in range(count):
        person, projects = rng.choice(people)
        submitted = now - dt.timedelta(seconds=rng.randint(3600, 90 * 86400))
        started = submitted + dt.timedelta(seconds=rng.randint(0, 4 * 3600))
        rows.append(
            Job(
                name=f"done-{index}",
                owner=person,
                project_id=rng.choice(projects) if projects else None,
                cluster=cluster,
                gpus=rng.choice(SIZES),
                min_runtime_s=3600,
                state=rng.choice([Job.State.COMPLETED] * 8 + [Job.State.FAILED]),
                submitted_at=submitted,
                started_at=started,
                first_started_at=started,
                ended_at=started + dt.timedelta(seconds=rng.randint(600, 8 * 3600)),
                nodes=[[f"{cluster.name}-00", 1]],
                attempt=1,
            )
        )
    Job.objects.bulk_create(rows, batch_size=2000)
    return count


def cancel_share(cluster: Cluster, share: float, seed: int) -> int:
    """Cancel ``share`` of the cluster's running jobs through the cancel service, as their
    owners would (a cluster admin here)."""
    admin = get_user_model().objects.get(username="admin")
    running = list(
        Job.objects.filter(cluster=cluster, state=Job.State.RUNNING)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    chosen = random.Random(seed).sample(running, max(1, round(len(running) * share)))
    for pk in chosen:
        cancel_job(admin, pk)
    return len(chosen)


# Renderings of each page at the least: the page targets (docs/benchmarks.md) are 95th percentiles.
PAGE_RENDERINGS = 20


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile (``share`` in 0..1) of ``values``."""
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(share * len(ordered)) - 1)], 1)


def time_page(client: Client, url: str, repeat: int) -> tuple[float, float, int, int]:
    """Median and 95th-percentile milliseconds, bytes and queries of ``url``, rendered
    ``repeat`` times (``PAGE_RENDERINGS`` at the least)."""
    timings, size, count = [], 0, 0
    for _ in range(max(repeat, PAGE_RENDERINGS)):
        with QueryCounter().counting() as queries:
            began = time.perf_counter()
            response = client.get(url)
            timings.append((time.perf_counter() - began) * 1000)
        if response.status_code != 200:
            raise RuntimeError(f"{url} answered {response.status_code}")
        size, count = len(response.content), queries.count
    return median(timings), percentile(timings, 0.95), size, count


def page_timings(cluster: Cluster, repeat: int) -> dict:
    client = Client()
    client.force_login(get_user_model().objects.get(username="admin"))
    out = {}
    for key, url in (
        ("queue_page", reverse("cluster-queue", args=[cluster.name])),
        ("operations_page", reverse("operations")),
    ):
        ms, p95, size, queries = time_page(client, url, repeat)
        out.update(
            {f"{key}_ms": ms, f"{key}_p95_ms": p95, f"{key}_bytes": size, f"{key}_queries": queries}
        )
    return out


def charge_timing(cluster: Cluster, count: int, repeat: int) -> dict:
    """One charging run (``accounting.charge_running_jobs``) over ``count`` funded jobs
    running on ``cluster`` (written in bulk with their liens, five minutes uncharged each),
    ``repeat`` times, each in a transaction rolled back afterwards: median milliseconds and
    the statements of one run. The benchmark's case: 5,000 running jobs."""
    from django.db import transaction

    from budgets.models import Lien
    from scheduling.accounting import charge_running_jobs

    people = [(p, projects) for p, projects in _researchers() if projects]
    rng = random.Random(14)
    now = timezone.now()
    nodes = list(cluster.nodes.values_list("name", flat=True))
    timings, statements = [], 0
    for _ in range(repeat):
        with transaction.atomic():
            jobs = []
            for index in range(count):
                person, projects = rng.choice(people)
                jobs.append(
                    Job(
                        name=f"charged-{index}",
                        owner=person,
                        project_id=rng.choice(projects),
                        cluster=cluster,
                        gpus=1,
                        min_runtime_s=600,
                        state=Job.State.RUNNING,
                        funded=True,
                        submitted_at=now - dt.timedelta(hours=1),
                        started_at=now - dt.timedelta(minutes=30),
                        first_started_at=now - dt.timedelta(minutes=30),
                        last_charged_at=now - dt.timedelta(minutes=5),
                        protected_until=now - dt.timedelta(minutes=20),
                        nodes=[[rng.choice(nodes), 1]],
                        attempt=1,
                    )
                )
            jobs = Job.objects.bulk_create(jobs, batch_size=1000)
            Lien.objects.bulk_create(
                [
                    Lien(node_id=j.project_id, job_ref=j.pk, cost_gpu_seconds=600, created_at=now)
                    for j in jobs
                ],
                batch_size=1000,
            )
            with QueryCounter().counting() as queries:
                began = time.perf_counter()
                charge_running_jobs(now)
                timings.append((time.perf_counter() - began) * 1000)
            statements = queries.count
            transaction.set_rollback(True)
    return {"charge_ms": median(timings), "charge_jobs": count, "charge_queries": statements}
