"""``GET /healthz`` for load balancers and monitors: the database, the broker, and each
cluster's last scheduling pass and backend sync. No login; the answer names parts and ages,
never a URL, a host or an error text (which may hold either).

503 when the database or the broker cannot be reached, or when a cluster's pass or sync is
older than ``ALLOT_HEALTH_STALE_S`` (the workers or beat are down: nothing is scheduled or
charged). A backend that does not answer (``reachable`` false) is reported but is not Allot
being down: its cluster page and the ``allot_cluster_reachable`` metric say so.
"""

from __future__ import annotations

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

TIMEOUT_S = 2


def database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except DatabaseError:
        return False


def broker_ok() -> bool:
    url = settings.CELERY_BROKER_URL
    try:
        if url.startswith(("redis://", "rediss://")):
            import redis

            client = redis.Redis.from_url(
                url, socket_connect_timeout=TIMEOUT_S, socket_timeout=TIMEOUT_S
            )
            try:
                return bool(client.ping())
            finally:
                client.close()
        from kombu import Connection

        with Connection(url, connect_timeout=TIMEOUT_S) as conn:
            conn.ensure_connection(max_retries=1, timeout=TIMEOUT_S)
        return True
    except Exception:  # noqa: BLE001 - any failure to reach the broker is "down"
        return False


def _age(then, now) -> float | None:
    return round((now - then).total_seconds(), 1) if then else None


def clusters(now) -> tuple[dict, bool]:
    from scheduling.models import Cluster

    stale_after = settings.ALLOT_HEALTH_STALE_S
    out, all_fresh = {}, True
    rows = Cluster.objects.order_by("name").values_list(
        "name", "last_pass_at", "last_sync_at", "reachable"
    )
    for name, last_pass, last_sync, reachable in rows:
        pass_age, sync_age = _age(last_pass, now), _age(last_sync, now)
        stale = [
            part
            for part, age in (("pass", pass_age), ("sync", sync_age))
            if age is None or age > stale_after
        ]
        all_fresh = all_fresh and not stale
        out[name] = {
            "last_pass_age_s": pass_age,
            "last_sync_age_s": sync_age,
            "backend_reachable": reachable,
            "stale": stale,
        }
    return out, all_fresh


def report() -> tuple[dict, int]:
    now = timezone.now()
    db = database_ok()
    broker = broker_ok()
    body = {"database": "ok" if db else "down", "broker": "ok" if broker else "down"}
    fresh = True
    if db:
        body["clusters"], fresh = clusters(now)
    body["stale_after_s"] = settings.ALLOT_HEALTH_STALE_S
    body["ok"] = db and broker and fresh
    return body, 200 if body["ok"] else 503
