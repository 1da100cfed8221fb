"""The scheduling loop on a real Celery worker and a real Redis broker, sharing PostgreSQL."""

import os
import subprocess
import sys
import threading
import time
import uuid

import pytest
from django.db import connection, connections

from portal.celery import app as celery_app
from scheduling import passes, tasks
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job
from tests.conftest import service_missing
from tests.scheduling.conftest import make_cluster

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def postgres():
    if connection.vendor != "postgresql":
        service_missing("a worker shares the database with the test: needs PostgreSQL")
    return connection.settings_dict


@pytest.fixture
def worker(postgres, redis_url, tmp_path):
    queue = f"allot-test-{uuid.uuid4().hex[:8]}"
    db = postgres
    env = {
        **os.environ,
        "DATABASE_URL": (
            f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
        ),
        "CELERY_BROKER_URL": redis_url,
        "ALLOT_CELERY_QUEUE": queue,
        "ALLOT_VAR_DIR": str(tmp_path / "var"),
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "portal",
            "worker",
            "--pool",
            "solo",
            "--queues",
            queue,
            "--loglevel",
            "WARNING",
            "--without-heartbeat",
            "--without-gossip",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    yield queue
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()


def _send(task, args, queue, redis_url):
    with celery_app.connection_for_write(redis_url) as conn:
        task.apply_async(args=args, queue=queue, connection=conn)


def _wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return False


def test_a_real_worker_schedules_and_dispatches_a_job(worker, redis_url, researcher, tmp_path):
    cluster = make_cluster(tmp_path)
    job = submit_job(
        researcher,
        JobRequest(
            name="train",
            project="nlp/olmo",
            cluster="jupiter",
            gpus=8,
            min_runtime_s=3600,
            sim_duration_s=3600,
        ),
    )
    _send(tasks.schedule_cluster, [cluster.pk], worker, redis_url)

    def running_and_dispatched():
        job.refresh_from_db()
        return job.state == Job.State.RUNNING and job.dispatched

    assert _wait_for(running_and_dispatched), f"job stayed {job.state}, dispatched={job.dispatched}"
    assert job.external_id.startswith("sim-")


def test_two_passes_started_at_once_only_one_runs(postgres, researcher, tmp_path, monkeypatch):
    from scheduling import dispatch

    real_schedule = passes.schedule

    def slow_schedule(snapshot):  # hold the lock long enough for the other pass to try it
        time.sleep(1.0)
        return real_schedule(snapshot)

    monkeypatch.setattr(passes, "schedule", slow_schedule)
    monkeypatch.setattr(dispatch, "enqueue_starts", lambda jobs: None)
    cluster = make_cluster(tmp_path)
    submit_job(
        researcher,
        JobRequest(name="train", project="nlp/olmo", cluster="jupiter", gpus=8, min_runtime_s=3600),
    )
    barrier = threading.Barrier(2)
    results = []

    def one_pass():
        barrier.wait()
        try:
            results.append(passes.run_pass(cluster.pk))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=one_pass) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.ran for r in results) == [False, True]
    assert Job.objects.filter(state=Job.State.RUNNING).count() == 1
