"""The production shape under load: gunicorn serving `portal.wsgi` with DEBUG off on
PostgreSQL, a Celery worker and beat on Redis, under concurrent submitters and a little fuzzing
(scripts/load-demo.py). No 5xx, the worker alive, the queue still moving afterwards.

It runs on a scratch database of its own (created and dropped here, next to the suite's test
database) and a Celery queue of its own, so nothing it submits reaches another test."""

import os
import secrets
import shutil
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from django.conf import settings

from tests.conftest import service_missing
from tests.portal.livedemo import free_port, manage, wait_for
from tests.portal.test_load import _answers, load_and_check

pytestmark = [pytest.mark.load, pytest.mark.celery]


@contextmanager
def scratch_database():
    db = settings.DATABASES["default"]
    if db["ENGINE"] != "django.db.backends.postgresql":
        service_missing("the gunicorn load run needs PostgreSQL (DATABASE_URL)")
    name = f"allot_load_{secrets.token_hex(4)}"
    server = dict(host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"])
    with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://{server['user']}@{server['host']}:{server['port']}/{name}"
    finally:
        with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def processes(env, commands, log_dir: Path):
    running = []
    try:
        for name, command in commands.items():
            log = open(log_dir / f"{name}.log", "w")  # noqa: SIM115 - closed below
            running.append((name, subprocess.Popen(command, env=env, stdout=log, stderr=log), log))
        yield {name: process for name, process, _ in running}
    finally:
        for _, process, _ in running:
            process.send_signal(signal.SIGTERM)
        for _, process, log in running:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()


def test_gunicorn_on_postgresql_under_submitters_and_a_fuzzer_serves_no_5xx(tmp_path, redis_url):
    if not shutil.which("gunicorn", path=str(Path(sys.executable).parent)):
        service_missing("gunicorn is not installed in the environment")
    with scratch_database() as database_url:
        base = {k: v for k, v in os.environ.items() if k != "CELERY_BROKER_URL"}
        env = base | {
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "ALLOT_CELERY_QUEUE": f"load-{secrets.token_hex(4)}",
            "ALLOT_VAR_DIR": str(tmp_path / "var"),
            "ALLOT_PASS_INTERVAL_S": "2",
            "PYTHONUNBUFFERED": "1",
        }
        seeding = env | {"DEBUG": "1"}  # seed_demo refuses to run in production, rightly
        manage(seeding, "migrate", "--noinput", capture_output=True)
        manage(seeding, "seed_demo", capture_output=True)
        production = env | {
            "DEBUG": "0",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "SECURE_SSL_REDIRECT": "0",  # plain HTTP on localhost, no TLS proxy in front
            "SESSION_COOKIE_SECURE": "0",
            "CSRF_COOKIE_SECURE": "0",
        }
        port = free_port()
        bin_dir = Path(sys.executable).parent
        celery = [sys.executable, "-m", "celery", "-A", "portal"]
        commands = {
            "web": [str(bin_dir / "gunicorn"), "portal.wsgi", "--bind", f"127.0.0.1:{port}",
                    "--workers", "3", "--threads", "4", "--timeout", "60"],
            "worker": [*celery, "worker", "--pool", "threads", "--concurrency", "4",
                       "--loglevel", "WARNING"],
            "beat": [*celery, "beat", "--loglevel", "WARNING",
                     "--schedule", str(tmp_path / "celerybeat-schedule")],
        }  # fmt: skip
        with processes(production, commands, tmp_path) as running:
            url = f"http://127.0.0.1:{port}"
            wait_for(lambda: _answers(f"{url}/login/"), 90)
            load_and_check(url, tmp_path)
            assert all(p.poll() is None for p in running.values()), {
                name: p.returncode for name, p in running.items()
            }
