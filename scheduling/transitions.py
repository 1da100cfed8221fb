"""The job state machine: one function moves a job between states and records the event.

pending → running → completed | failed
running → preempted → pending        (requeue keeps the original submit time)
preempted | pending → completed | failed  (the backend says the stopped attempt's work had
                                           already ended on its own: it is not run again)
pending | running | preempted → cancelled
"""

from __future__ import annotations

from datetime import datetime

from scheduling.models import Job, JobEvent

S = Job.State
ALLOWED: dict[str, set[str]] = {
    S.PENDING: {S.RUNNING, S.CANCELLED, S.COMPLETED, S.FAILED},
    S.RUNNING: {S.COMPLETED, S.FAILED, S.PREEMPTED, S.CANCELLED},
    S.PREEMPTED: {S.PENDING, S.CANCELLED, S.COMPLETED, S.FAILED},
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


def transition(
    job: Job, target: str, at: datetime, message: str = "", event: dict | None = None, **fields
) -> Job:
    """Move ``job`` to ``target``, set ``fields`` and write one timeline event (with the
    event's own fields in ``event``, such as a preemption's ``lost_gpu_seconds``).

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
        **(event or {}),
    )
    return job


def transition_many(moves: list[tuple[Job, str, dict]], target: str, at: datetime) -> None:
    """``transition`` for many jobs at once (a pass's starts), in two statements: one
    conditional UPDATE of every row (``core.bulk_sql``: each row's fields, only where the
    state is still the one read) and one INSERT of the events. ``moves`` holds (job, event
    message, fields); every job is in the same state and gets the same set of fields.

    As with ``transition``, a job another transaction changed first makes this raise
    InvalidTransition (the caller's transaction then rolls back: nothing is half-applied).
    """
    from core.bulk_sql import update_many

    if not moves:
        return
    previous = moves[0][0].state
    names = list(moves[0][2])
    for job, _, fields in moves:
        if job.state != previous or target not in ALLOWED[job.state] or list(fields) != names:
            raise InvalidTransition(job, target)
    changed = update_many(
        Job,
        "pk",
        ["state", *names],
        ([job.pk, target, *fields.values()] for job, _, fields in moves),
        where={"state": previous},
    )
    if changed != len(moves):
        now = dict(
            Job.objects.filter(pk__in=[j.pk for j, _, _ in moves]).values_list("pk", "state")
        )
        moved = next((j for j, _, _ in moves if now.get(j.pk) != target), moves[0][0])
        raise InvalidTransition(moved, target)
    events = []
    for job, message, fields in moves:
        job.state = target
        for name, value in fields.items():
            setattr(job, name, value)
        kind = target if previous != S.PREEMPTED or target != S.PENDING else "requeued"
        nodes = [name for name, _ in job.nodes] if target == S.RUNNING else []
        events.append(JobEvent(job=job, at=at, kind=kind, message=message, nodes=nodes))
    JobEvent.objects.bulk_create(events)
