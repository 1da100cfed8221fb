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


def transition(job: Job, target: str, at: datetime, message: str = "", **fields) -> Job:
    """Move ``job`` to ``target``, set ``fields`` and write one timeline event.

    Callers run inside a transaction and hold the job row (``select_for_update``); the update
    is conditional on the state read, so a concurrent change makes this raise instead of
    silently overwriting.
    """
    if target not in ALLOWED[job.state]:
        raise InvalidTransition(job, target)
    previous = job.state
    updated = Job.objects.filter(pk=job.pk, state=previous).update(state=target, **fields)
    if updated != 1:
        job.refresh_from_db(fields=["state"])
        raise InvalidTransition(job, target)
    job.state = target
    for name, value in fields.items():
        setattr(job, name, value)
    JobEvent.objects.create(
        job=job,
        at=at,
        kind=target if previous != S.PREEMPTED or target != S.PENDING else "requeued",
        message=message,
        nodes=[name for name, _ in job.nodes] if target == S.RUNNING else [],
    )
    return job
