"""Discovery asked for in the admin runs in a worker with a time
limit. A backend that hangs — here the fake Kubernetes API server accepting the request and
saying nothing, behind a cluster whose own per-call ``timeout`` option is far longer — is cut
off at ALLOT_DISCOVERY_TIMEOUT_S by a real Celery worker (prefork: the pool enforces soft time
limits; the solo pool would not), and the admin shows why on the cluster."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest
from django.conf import settings
from django.db import connection

from portal.celery import app as celery_app
from scheduling.models import Cluster
from scheduling.tasks import discover_cluster
from tests.backends.k8s_fake import fake_api_fixture  # noqa: F401 - the fixture is used by name
from tests.conftest import service_missing

pytestmark = [pytest.mark.celery, pytest.mark.kubernetes, pytest.mark.django_db(transaction=True)]

LIMIT_S = 4  # the fake hangs for 10 s before it answers 503: only the limit stops it sooner


@pytest.fixture
def worker(redis_url, tmp_path, monkeypatch):
    if connection.vendor != "postgresql":
        service_missing("a worker shares the database with the test: needs PostgreSQL")
    db = connection.settings_dict
    queue = f"allot-discovery-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "DATABASE_URL": (
            f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
        ),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "ALLOT_CELERY_QUEUE": queue,
        "ALLOT_DISCOVERY_TIMEOUT_S": str(LIMIT_S),
        "ALLOT_VAR_DIR": str(tmp_path / "var"),
    }
    args = [sys.executable, "-m", "celery", "-A", "portal", "worker", "--pool", "prefork"]
    args += ["--concurrency", "1", "--queues", queue, "--loglevel", "WARNING"]
    args += ["--without-heartbeat", "--without-gossip", "--without-mingle"]
    # The client is imported before the pool forks, so the task's clock runs on the call alone
    # (a loaded machine can spend seconds importing it).
    args += ["--include", "scheduling.backends.kubernetes"]
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        process = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)
    # The admin enqueues to the default queue; this test's is the worker's alone.
    previous = celery_app.conf.task_default_queue, celery_app.conf.task_always_eager
    celery_app.conf.task_default_queue, celery_app.conf.task_always_eager = queue, False
    # The sender's limits travel in the message (Celery's exec options), so the web process
    # reads the same setting as the worker; this process imported the tasks with the default.
    monkeypatch.setattr(discover_cluster, "soft_time_limit", LIMIT_S)
    monkeypatch.setattr(discover_cluster, "time_limit", LIMIT_S + 15)
    monkeypatch.setattr(discover_cluster, "_exec_options", None)
    yield log
    celery_app.conf.task_default_queue, celery_app.conf.task_always_eager = previous
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def test_a_hanging_discovery_is_cut_off_at_the_limit_and_the_admin_sees_why(
    fake_api, worker, admin_client
):
    cluster = Cluster.objects.create(
        name="k8s-hang",
        backend="kubernetes",
        options={"host": fake_api.url, "timeout": "600"},  # the backend would wait 10 minutes
    )
    fake_api.outage = "hang"

    sent = time.monotonic()
    response = admin_client.post(
        "/admin/scheduling/cluster/",
        {"action": "rediscover_nodes", "_selected_action": [cluster.pk]},
        follow=True,
    )
    assert "discovery queued" in response.content.decode()

    deadline = time.monotonic() + 60  # the worker's start-up on a busy machine, then the limit
    while time.monotonic() < deadline:
        cluster.refresh_from_db()
        if cluster.last_error:
            break
        time.sleep(0.2)
    noticed = time.monotonic()
    assert cluster.last_error == f"discovery: did not finish within {LIMIT_S} s", (
        cluster.last_error or worker.read_text()
    )
    assert not cluster.reachable and not cluster.nodes.exists()
    # The worker really asked the API server and hung on it; it was cut off at the limit,
    # not by the fake's own answer after 10 s nor the backend's 600 s timeout.
    (asked,) = [r["at"] for r in fake_api.requests if r["path"] == "/api/v1/nodes"]
    # (the task's clock starts before the request: the worker imports the client first)
    assert noticed - sent >= LIMIT_S
    assert noticed - asked < LIMIT_S + 5, f"cut off {noticed - asked:.1f} s after the request"

    page = admin_client.get(f"/admin/scheduling/cluster/{cluster.pk}/change/").content.decode()
    assert f"did not finish within {LIMIT_S} s" in page


def test_the_limit_is_read_from_the_setting():
    from scheduling.tasks import DISCOVERY_TIMEOUT_S

    assert discover_cluster.soft_time_limit == DISCOVERY_TIMEOUT_S
    assert DISCOVERY_TIMEOUT_S == settings.ALLOT_DISCOVERY_TIMEOUT_S
