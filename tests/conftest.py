"""Project-wide fixtures: personas, services that may be missing, helpers."""

import os
import shutil
import socket

import pytest

pytest_plugins = ["tests.personas"]


def service_missing(reason: str):
    """Skip on a bare machine; fail in CI (ALLOT_REQUIRE_SERVICES=1), where every service
    a test needs must be there."""
    if os.environ.get("ALLOT_REQUIRE_SERVICES", "") in {"1", "true", "yes"}:
        pytest.fail(f"required service missing: {reason}", pytrace=False)
    pytest.skip(reason)


def tcp_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def pytest_unconfigure(config):
    """Django removes the SQLite test database's file (tests/settings.py), not what lies
    beside it: SQLite's -wal and -shm files, the folder of its locks (core/sqlite/locks.py)."""
    from django.conf import settings

    database = getattr(settings, "SQLITE_TEST_DATABASE", None) if settings.configured else None
    for path in database.parent.glob(f"{database.name}*") if database else []:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


@pytest.fixture
def redis_url():
    url = os.environ.get("REDIS_URL", "")
    if not url:
        service_missing("REDIS_URL is not set")
    from urllib.parse import urlparse

    parsed = urlparse(url)
    if not tcp_open(parsed.hostname or "127.0.0.1", parsed.port or 6379):
        service_missing(f"Redis is not reachable at {url}")
    return url


@pytest.fixture
def eager_celery():
    """Celery tasks run in-process, right where they are queued (after the commit, for those
    queued on commit), unless a test starts a real worker."""
    from portal.celery import app as celery_app

    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = previous


@pytest.fixture
def chromium_path():
    path = os.environ.get("ALLOT_CHROMIUM", "/usr/bin/chromium")
    if not shutil.which(path):
        service_missing(f"Chromium not found at {path}")
    return path


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """PBKDF2's deliberate slowness costs seconds per persona; tests need no such protection."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
