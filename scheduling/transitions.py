"""The job state machine: one function moves a job between states and records the event.

pending → running → completed | failed
running → preempted → pending        (requeue keeps the original submit time)
pending | running | preempted → cancelled
"""

from __future__ import annotations

from datetime import datetime

from scheduling.models import Job, JobEvent

S = Job.State
ALLOWED: dict[str, set[str]] = {
    S.PENDING: {S.RUNNING, S.CANCELLED},
    S.RUNNING: {S.COMPLETED, S.FAILED, S.PREEMPTED, S.CANCELLED},
    S.PREEMPTED: {S.PENDING, S.CANCELLED},
    S.COMPLETED: set(),
    S.FAILED: set(),
    S.CANCELLED: set(),
}


class InvalidTransition(Exception):
    def __init__(self, job: Job, target: str):
        super().__init__(f"state: job #{job.pk} cannot go from {job.state} to {target}")
        self.field = "state"


def set_state_if_unchanged(row, target: str, **fields) -> bool:
    """Move ``row`` to ``target`` and set ``fields`` with one conditional UPDATE (… WHERE
    state = the state read), then mirror the change onto ``row``. False, with ``row.state``
    re-read, when another transaction changed the state first. Used by every state machine
    (jobs here, exception requests in ``exceptions.workflow``)."""
    model = type(row)
    updated = model.objects.filter(pk=row.pk, state=row.state).update(state=target, **fields)
    if updated != 1:
        row.refresh_from_db(fields=["state"])
        return False
    row.state = target
    for name, value in fields.items():
        setattr(row, name, value)
    return True


def transition(job: Job, target: str, at: datetime, message: str = "", **fields) -> Job:
    """Move ``job`` to ``target``, set ``fields`` and write one timeline event.

    Callers run inside a transaction and hold the job row (``select_for_update``); the update
    is conditional on the state read, so a concurrent change makes this raise instead of
    silently overwriting.
    """
    if target not in ALLOWED[job.state]:
        raise InvalidTransition(job, target)
    previous = job.state
    if not set_state_if_unchanged(job, target, **fields):
        raise InvalidTransition(job, target)
    JobEvent.objects.create(
        job=job,
        at=at,
        kind=target if previous != S.PREEMPTED or target != S.PENDING else "requeued",
        message=message,
        nodes=[name for name, _ in job.nodes] if target == S.RUNNING else [],
    )
    return job
