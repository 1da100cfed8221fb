"""Scale-out: two worker processes on one broker schedule two clusters in parallel (one lock
per cluster), and however the passes land on them, no job is started twice."""

import os
import subprocess
import sys
import time
import uuid

import pytest
from django.db import connection, transaction

from budgets.models import BudgetNode
from scheduling import tasks
from scheduling.models import Job, JobEvent
from scheduling.services import JobRequest, submit_job
from tests.conftest import service_missing
from tests.scheduling.conftest import make_cluster
from tests.workers.test_real_worker import _send, _wait_for

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def two_workers(redis_url, tmp_path):
    if connection.vendor != "postgresql":
        service_missing("workers share the database with the test: needs PostgreSQL")
    db = connection.settings_dict
    queue = f"allot-test-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "DATABASE_URL": (
            f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
        ),
        "CELERY_BROKER_URL": redis_url,
        "ALLOT_CELERY_QUEUE": queue,
        "ALLOT_VAR_DIR": str(tmp_path / "var"),
    }
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "portal",
                "worker",
                "--pool",
                "solo",  # one task at a time: a second pass needs the second process
                "--queues",
                queue,
                "--hostname",
                f"w{index}@%h",
                "--loglevel",
                "WARNING",
                "--without-heartbeat",
                "--without-gossip",
                "--without-mingle",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for index in (1, 2)
    ]
    yield queue
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()


def running_and_dispatched(job) -> bool:
    job.refresh_from_db()
    return job.state == Job.State.RUNNING and job.dispatched


def test_two_workers_schedule_two_clusters_in_parallel_and_start_each_job_once(
    two_workers, redis_url, researcher, budget_tree, tmp_path
):
    make_cluster(tmp_path / "a", name="alpha")
    make_cluster(tmp_path / "b", name="beta")
    funded = submit_job(
        researcher,
        JobRequest(name="funded", project="nlp/olmo", cluster="alpha", gpus=8, min_runtime_s=600),
    )
    free = submit_job(
        researcher,
        JobRequest(name="free", project="", cluster="beta", gpus=8, min_runtime_s=600),
    )
    alpha, beta = funded.cluster_id, free.cluster_id  # two clusters, one lock each

    # Hold the budget tree's root: alpha's pass, which must lock its start's funding chain,
    # stops there with its worker; beta's start needs no funds.
    with transaction.atomic():
        BudgetNode.objects.select_for_update().get(pk=budget_tree.root.pk)
        _send(tasks.schedule_cluster, [alpha], two_workers, redis_url)
        time.sleep(1.0)  # let one worker take alpha's pass and block in it
        for _ in range(3):  # and the same cluster's pass twice more: at most one may run
            _send(tasks.schedule_cluster, [beta], two_workers, redis_url)
        # beta is scheduled and dispatched by the other worker while alpha's pass waits.
        assert _wait_for(lambda: running_and_dispatched(free)), free.state
        funded.refresh_from_db()
        assert funded.state == Job.State.PENDING
    # The lock released, alpha's pass goes on.
    assert _wait_for(lambda: running_and_dispatched(funded)), funded.state

    for job in (funded, free):
        job.refresh_from_db()
        assert job.attempt == 1
        assert JobEvent.objects.filter(job=job, kind="running").count() == 1
