"""GET /healthz: database, broker, each cluster's last pass and sync; 503 when a part is down."""

import subprocess
import sys
from datetime import timedelta

import httpx
import pytest
import time_machine
from django.utils import timezone

from scheduling import tasks
from tests.faults.services import free_port


@pytest.fixture
def broker(settings, redis_url):
    settings.CELERY_BROKER_URL = redis_url
    return redis_url


@pytest.mark.django_db
def test_healthz_answers_200_with_every_part_and_no_login(client, broker):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {
        "database": "ok",
        "broker": "ok",
        "clusters": {},
        "stale_after_s": 300,
        "ok": True,
    }


def test_healthz_reports_each_clusters_pass_and_sync(client, broker, cluster):
    tasks.schedule_cluster(cluster.pk)
    tasks.sync_cluster(cluster.pk)
    body = client.get("/healthz").json()
    jupiter = body["clusters"]["jupiter"]
    assert body["ok"] is True
    assert jupiter["stale"] == []
    assert 0 <= jupiter["last_pass_age_s"] < 60
    assert 0 <= jupiter["last_sync_age_s"] < 60
    assert jupiter["backend_reachable"] is True


def test_healthz_is_503_when_passes_and_syncs_stop(client, broker, cluster, settings):
    """Workers or beat down: the last pass and sync grow old; the answer names them."""
    tasks.schedule_cluster(cluster.pk)
    tasks.sync_cluster(cluster.pk)
    with time_machine.travel(timezone.now() + timedelta(seconds=301)):
        response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["clusters"]["jupiter"]["stale"] == ["pass", "sync"]
    assert response.json()["ok"] is False


def test_a_cluster_that_never_had_a_pass_is_stale(client, broker, cluster):
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["clusters"]["jupiter"]["stale"] == ["pass", "sync"]


@pytest.mark.django_db
def test_healthz_is_503_when_the_broker_is_down_and_names_no_address(client, settings):
    port = free_port()  # nothing listens there
    settings.CELERY_BROKER_URL = f"redis://:hunter2@127.0.0.1:{port}/0"
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["broker"] == "down"
    assert response.json()["database"] == "ok"
    assert str(port) not in response.content.decode()
    assert "hunter2" not in response.content.decode()


@pytest.mark.postgres
def test_healthz_is_503_while_postgresql_is_stopped(tmp_path, redis_url):
    """A server on its own PostgreSQL (never the shared one): 200, stop PostgreSQL, 503 naming
    the database, start it again, 200 (the persistent connection that broke is replaced)."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from tests.faults.services import Postgres

    root = Path(tempfile.mkdtemp(prefix="allot-health-"))
    root.chmod(0o755)  # the postgres user must reach its data directory below (as tests/faults)
    postgres = Postgres(root / "pg")
    server = None
    try:
        postgres.init()
        postgres.sql("CREATE DATABASE allot_health")
        port = free_port()
        env = {k: v for k, v in os.environ.items() if k not in {"CELERY_BROKER_URL"}}
        env |= {
            "DATABASE_URL": f"{postgres.url_base}/allot_health",
            "REDIS_URL": redis_url,
            "DEBUG": "1",
            "ALLOT_VAR_DIR": str(tmp_path / "var"),
        }
        manage = [sys.executable, "manage.py"]
        subprocess.run([*manage, "migrate", "--noinput"], env=env, check=True, capture_output=True)
        server = subprocess.Popen(
            [*manage, "runserver", "--noreload", f"127.0.0.1:{port}"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}/healthz"

        def status():
            try:
                return httpx.get(url, timeout=10).status_code
            except httpx.TransportError:
                return None

        from tests.operations.conftest import wait_for

        assert wait_for(status) == 200
        postgres.stop()
        down = httpx.get(url, timeout=30)
        assert down.status_code == 503
        assert down.json() == {
            "database": "down",
            "broker": "ok",
            "stale_after_s": 300,
            "ok": False,
        }
        postgres.start()
        assert wait_for(lambda: status() == 200)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        postgres.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.django_db
def test_the_demos_embedded_broker_counts_as_up(client, settings, tmp_path):
    settings.CELERY_BROKER_URL = f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}"
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json()["broker"] == "ok"
