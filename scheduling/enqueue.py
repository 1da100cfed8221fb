"""The one place the scheduling logic hands work to Celery.

Tasks are named, not imported: `tasks.py` imports the logic, and the logic enqueues through
here, so no import circle runs through the tasks. Every enqueue waits for the surrounding
transaction to commit, so a worker never reads decisions that could still roll back.
"""

from __future__ import annotations

import importlib

from celery import current_app
from django.db import transaction

from core.faults import fault_point

DISPATCH_START = "scheduling.tasks.dispatch_start"
DISPATCH_STARTS = "scheduling.tasks.dispatch_starts"
DISPATCH_STOP = "scheduling.tasks.dispatch_stop"
MIRROR_DRAIN = "scheduling.tasks.mirror_drain"
DISCOVER = "scheduling.tasks.discover_cluster"


def on_commit(task_name: str, *args: object) -> None:
    """Send `task_name(*args)` once the current transaction commits (at once outside one)."""

    def send() -> None:
        fault_point("commit.before_enqueue")  # committed, not yet handed to the broker
        # Through the registered task, so that apply_async honours task_always_eager (a bare
        # signature goes through send_task, which ignores it). The module is imported here,
        # at send time, so no import circle runs through the tasks.
        if task_name not in current_app.tasks:
            importlib.import_module(task_name.rpartition(".")[0])
        current_app.tasks[task_name].apply_async(args=args)

    transaction.on_commit(send)


def start(job_id: int, attempt_key: str) -> None:
    on_commit(DISPATCH_START, job_id, attempt_key)


def starts(pairs: list[tuple[int, str]]) -> None:
    """One message for many starts (a pass's): [(job id, attempt key), ...]."""
    on_commit(DISPATCH_STARTS, [list(pair) for pair in pairs])


def stop(job_id: int, attempt_key: str, *, cancel: bool) -> None:
    on_commit(DISPATCH_STOP, job_id, attempt_key, cancel)


def mirror_drain(node_id: int) -> None:
    on_commit(MIRROR_DRAIN, node_id)


def discover(cluster_id: int) -> None:
    on_commit(DISCOVER, cluster_id)
