"""Committed decisions → backend calls, through Celery tasks enqueued after commit.

Every start carries an attempt key (``<job id>-<attempt>``); backends refuse to launch the same
key twice, so a retried or duplicated dispatch never starts a job twice.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from portal.faults import fault_point
from scheduling import enqueue
from scheduling.backends.base import Backend, LaunchSpec, get_backend
from scheduling.models import Cluster, Job, Node


def backend_for(cluster: Cluster) -> Backend:
    return get_backend(cluster.backend, cluster.name, cluster.options)


def launch_spec(job: Job) -> LaunchSpec:
    per_node = max((gpus for _, gpus in job.nodes), default=job.gpus)
    remaining = None
    if job.sim_duration_s is not None:
        remaining = max(1, job.sim_duration_s - (job.run_seconds_done if job.resumable else 0))
    return LaunchSpec(
        job_id=job.pk,
        attempt_key=job.attempt_key,
        name=job.name,
        user=job.owner.username,
        project=job.project.slug_path if job.project_id else "",
        gpus=job.gpus,
        nodes=tuple(name for name, _ in job.nodes),
        gpus_per_node=per_node,
        command=job.command or "true",
        sim_duration_s=remaining,
    )


def start_on_backend(job_id: int, attempt_key: str) -> bool:
    """Launch one committed start. Idempotent: returns False if it no longer applies."""
    job = Job.objects.select_related("cluster", "owner", "project").get(pk=job_id)
    if job.state != Job.State.RUNNING or job.attempt_key != attempt_key:
        return False
    fault_point("dispatch.before_submit")
    remote = backend_for(job.cluster).submit(launch_spec(job))
    fault_point("dispatch.after_submit")  # launched, not yet recorded
    Job.objects.filter(pk=job.pk, attempt_key=attempt_key).update(
        dispatched=True, external_id=remote.external_id
    )
    return True


def stop_on_backend(job_id: int, attempt_key: str, cancel: bool = False) -> None:
    """Stop a preempted or cancelled attempt, then requeue a preempted job."""
    job = Job.objects.select_related("cluster").get(pk=job_id)
    backend = backend_for(job.cluster)
    if job.external_id or job.attempt_key == attempt_key:
        external = job.external_id or _find_external(backend, attempt_key)
        if external:
            (backend.cancel if cancel else backend.preempt)(job.pk, external)
    fault_point("stop.after_backend")  # stopped on the backend, not yet requeued
    if job.state == Job.State.PREEMPTED and job.attempt_key == attempt_key:
        requeue_preempted(job.pk, attempt_key)


@transaction.atomic
def requeue_preempted(job_id: int, attempt_key: str) -> None:
    from scheduling.transitions import transition

    requeue = Job.objects.select_for_update().get(pk=job_id)
    if requeue.state == Job.State.PREEMPTED and requeue.attempt_key == attempt_key:
        transition(
            requeue,
            Job.State.PENDING,
            timezone.now(),
            "requeued with its original submit time",
            nodes=[],
            dispatched=False,
            external_id="",
            pending_code="Priority",
            pending_message="Requeued after preemption.",
        )


def _find_external(backend: Backend, attempt_key: str) -> str:
    for remote in backend.sync():
        if remote.attempt_key == attempt_key:
            return remote.external_id
    return ""


def enqueue_start(job: Job) -> None:
    enqueue.start(job.pk, job.attempt_key)


def enqueue_preempt(job: Job) -> None:
    enqueue.stop(job.pk, job.attempt_key, cancel=False)


def enqueue_cancel(job: Job) -> None:
    enqueue.stop(job.pk, job.attempt_key, cancel=True)


def enqueue_drain(node: Node) -> None:
    enqueue.mirror_drain(node.pk)
