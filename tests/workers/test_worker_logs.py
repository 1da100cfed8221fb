"""A real Celery worker under LOG_FORMAT=json: every line it writes, Celery's own included, is
one JSON object, and a task's events carry the task's name and id."""

import json
import os
import queue as queues
import subprocess
import sys
import threading
import time
import uuid

import pytest

from portal.celery import app as celery_app
from scheduling import tasks
from tests.workers.test_real_worker import postgres  # noqa: F401

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]


def test_a_json_worker_writes_only_json_and_tags_events_with_the_task(
    postgres,  # noqa: F811
    redis_url,
    tmp_path,
):
    queue = f"allot-test-{uuid.uuid4().hex[:8]}"
    db = postgres
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:"
        f"{db['PORT'] or 5432}/{db['NAME']}",
        "CELERY_BROKER_URL": redis_url,
        "ALLOT_CELERY_QUEUE": queue,
        "ALLOT_VAR_DIR": str(tmp_path / "var"),
        "LOG_FORMAT": "json",
    }
    command = [sys.executable, "-m", "celery", "-A", "portal", "--quiet", "worker",
               "--pool", "solo", "--queues", queue, "--loglevel", "INFO",
               "--without-heartbeat", "--without-gossip"]  # fmt: skip
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: queues.Queue = queues.Queue()
    threading.Thread(
        target=lambda: [lines.put(line) for line in process.stdout], daemon=True
    ).start()
    try:
        with celery_app.connection_for_write(redis_url) as conn:
            tasks.charge_usage.apply_async(queue=queue, connection=conn)
        seen, charge = [], None
        deadline = time.monotonic() + 60
        while charge is None and time.monotonic() < deadline:
            try:
                line = lines.get(timeout=1)
            except queues.Empty:
                continue
            if line.strip():
                seen.append(line)
                record = json.loads(line)  # fails the test on any line that is not JSON
                if record.get("event") == "charge":
                    charge = record
    finally:
        process.terminate()
        process.wait(timeout=15)
    assert charge is not None, "no charge event in:\n" + "".join(seen)
    assert charge["task_name"] == "scheduling.tasks.charge_usage"
    assert charge["task_id"] and charge["logger"] == "scheduling.accounting"
    assert any("celery" in json.loads(line)["logger"] for line in seen)  # Celery's own, as JSON
