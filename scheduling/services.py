"""Writes to jobs and clusters: submission, cancellation, drains. Each is atomic and audited
in the job's timeline (governance changes to budgets are audited by budgets.services)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from functools import cache

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from core.insert_linked import insert_linked
from core.raw_rows import reading, table
from scheduling import identity, job_env
from scheduling.errors import JobPermissionError, JobValidationError
from scheduling.models import Cluster, Job, JobEvent, Node
from scheduling.transitions import transition

PRIORITIES = ("low", "normal", "high", "urgent")
INTERACTIVE_MAX_RUNTIME_S = 2 * 3600
MAX_SIM_DURATION_S = 90 * 24 * 3600


@dataclass(frozen=True)
class JobRequest:
    name: str
    project: str  # budget path; "" submits unfunded work
    cluster: str
    gpus: int
    min_runtime_s: int
    resumable: bool = True
    kind: str = "batch"
    command: str = ""
    sim_duration_s: int | None = None
    priority: str = "normal"
    env: dict[str, str] | None = None  # NAME → value the job sees (scheduling.job_env)


def _project_for(user, path: str):
    from budgets.access import submittable_project

    if not path:
        return None
    project = submittable_project(user, path)
    if project is None:
        raise JobPermissionError(
            "project", f"you are not a member of project {path!r} (or it does not exist)"
        )
    return project


def _cluster_for(name: str) -> Cluster:
    """The cluster, with the shape a submission is checked against (its present nodes' GPUs
    in all and on the largest node) read in the same query. Written as SQL: every submission
    asks, and building this aggregate through the ORM cost more Python than the rest of the
    lookup together."""
    clusters = reading(Cluster)
    with connection.cursor() as cursor:
        cursor.execute(_cluster_sql(), [name])
        row = cursor.fetchone()
    cluster = None
    if row is not None:
        cluster = clusters.instance(row[: clusters.width])
        cluster.present_gpus, cluster.largest_node_gpus = row[clusters.width :]
    if cluster is None:
        raise JobValidationError("cluster", f"no cluster named {name!r}")
    return cluster


@cache
def _cluster_sql() -> str:
    return (
        f"SELECT {reading(Cluster).columns('c')}, "
        "COALESCE(SUM(CASE WHEN n.present THEN n.gpus END), 0) AS present_gpus, "
        "COALESCE(MAX(CASE WHEN n.present THEN n.gpus END), 0) AS largest_node_gpus "
        f"FROM {table(Cluster)} c LEFT JOIN {table(Node)} n "
        "ON n.cluster_id = c.id WHERE c.name = %s GROUP BY c.id"
    )


def _check_shape(request: JobRequest, cluster: Cluster) -> None:
    if request.gpus < 1:
        raise JobValidationError("gpus", "a job needs at least 1 GPU")
    total, per_node = cluster.present_gpus, cluster.largest_node_gpus
    if request.gpus > total:
        raise JobValidationError(
            "gpus", f"{request.gpus} GPUs is more than cluster {cluster.name} has ({total})"
        )
    if request.gpus > per_node and per_node and request.gpus % per_node:
        raise JobValidationError(
            "gpus",
            f"a job larger than one node takes whole nodes: ask for a multiple of {per_node}",
        )


def _check_runtime(request: JobRequest) -> None:
    cap = settings.ALLOT_MAX_MIN_RUNTIME_S
    if request.min_runtime_s < 60:
        raise JobValidationError("min_runtime_s", "the minimum runtime is at least 60 seconds")
    if request.kind == Job.Kind.INTERACTIVE and request.min_runtime_s > INTERACTIVE_MAX_RUNTIME_S:
        raise JobValidationError(
            "min_runtime_s",
            f"interactive sessions are protected for at most {INTERACTIVE_MAX_RUNTIME_S // 3600} h",
        )
    longest = int(float(getattr(settings, "ALLOT_EXCEPTION_MAX_PROTECTION_H", 72)) * 3600)
    if request.min_runtime_s > cap and request.min_runtime_s > longest:
        raise JobValidationError(
            "min_runtime_s",
            f"protection is capped at {cap // 3600} h, and an extended_protection exception "
            f"can extend it to at most {longest / 3600:g} h",
        )


def validate_request(user, request: JobRequest) -> tuple[Cluster, object]:
    if not request.name.strip():
        raise JobValidationError("name", "give the job a name")
    if request.kind not in Job.Kind.values:
        raise JobValidationError("kind", f"kind must be one of {', '.join(Job.Kind.values)}")
    if request.priority not in PRIORITIES:
        raise JobValidationError("priority", f"priority must be one of {', '.join(PRIORITIES)}")
    if request.sim_duration_s is not None and not 1 <= request.sim_duration_s <= MAX_SIM_DURATION_S:
        raise JobValidationError("sim_duration_s", "must be between 1 s and 90 days")
    job_env.check_env(request.env)
    cluster = _cluster_for(request.cluster)
    identity.check_can_submit(user, cluster)
    project = _project_for(user, request.project)
    _check_shape(request, cluster)
    _check_runtime(request)
    return cluster, project


def submit_job(user, request: JobRequest) -> Job:
    """Queue a job. The next scheduling pass decides its funding and placement.

    The job and its first event are one statement (``core.insert_linked``: a submission is
    the API's hottest write). A min runtime above the cap adds an event that
    names the job's own request page, so that one is written after, in the same transaction."""
    cluster, project = validate_request(user, request)
    now = timezone.now()
    job = Job(
        name=request.name.strip(),
        owner=user,
        project=project,
        cluster=cluster,
        gpus=request.gpus,
        min_runtime_s=request.min_runtime_s,
        resumable=request.resumable,
        kind=request.kind,
        command=request.command,
        env=job_env.check_env(request.env),
        sim_duration_s=request.sim_duration_s,
        priority=request.priority,
        submitted_at=now,
        pending_code="New",
        pending_message="Waiting for the next scheduling pass.",
    )
    submitted = JobEvent(at=now, kind="submitted", message=f"{job.gpus} GPUs")
    if not needs_protection_request(job):
        insert_linked(job, [submitted], "job")
        return job
    with transaction.atomic():
        insert_linked(job, [submitted], "job")
        cap = settings.ALLOT_MAX_MIN_RUNTIME_S
        JobEvent.objects.create(
            job=job,
            at=now,
            kind="protection",
            message=f"min runtime {job.min_runtime_s / 3600:g} h is above the {cap // 3600} h "
            f"cap: protected {cap // 3600} h from each start until an extended_protection "
            f"exception is approved (request it at {protection_request_url(job)})",
        )
    return job


def needs_protection_request(job: Job) -> bool:
    """A batch job whose min runtime is above the cap and that no exception covers yet."""
    if job.min_runtime_s <= settings.ALLOT_MAX_MIN_RUNTIME_S or job.max_protection_s:
        return False
    return job.kind == Job.Kind.BATCH and not job.is_terminal


def protection_request_url(job: Job) -> str | None:
    """The prefilled extended_protection request for a job that needs one; None otherwise."""
    from django.urls import reverse

    if not needs_protection_request(job):
        return None
    hours = f"{job.min_runtime_s / 3600:g}"
    return reverse("exception-new-protection", args=[job.pk]) + f"?hours={hours}"


def can_cancel(user, job: Job) -> bool:
    from budgets.access import is_cluster_admin

    return job.owner_id == user.pk or is_cluster_admin(user)


@transaction.atomic
def cancel_job(user, job_id: int) -> Job:
    from scheduling import accounting, dispatch

    job = Job.objects.select_for_update().get(pk=job_id)
    if not can_cancel(user, job):
        raise JobPermissionError(None, "only the job's owner or a cluster admin can cancel it")
    if job.is_terminal:
        raise JobValidationError("state", f"job #{job.pk} is already {job.state}")
    now = timezone.now()
    was_running = job.state == Job.State.RUNNING
    if was_running:
        accounting.close_run(job, now)
    transition(
        job,
        Job.State.CANCELLED,
        now,
        f"cancelled by {user.username}",
        ended_at=now,
        pending_code="",
        queue_position=None,
        estimated_start=None,
    )
    if was_running or job.external_id:
        dispatch.enqueue_cancel(job)
    return job


@transaction.atomic
def set_node_drain(user, node_id: int, drained: bool, reason: str = "") -> Node:
    from budgets.access import is_cluster_admin

    if not is_cluster_admin(user):
        raise JobPermissionError(None, "only cluster admins drain nodes")
    node = Node.objects.select_for_update(of=("self",)).select_related("cluster").get(pk=node_id)
    now = timezone.now()
    if drained:
        if not reason.strip():
            raise JobValidationError("reason", "say why the node is drained")
        fields = dict(
            drained=True,
            drain_reason=reason.strip()[:200],
            drain_requested_at=now,
            drain_requested_by=user,
            drained_by=None,
        )
    else:
        fields = dict(
            drained=False,
            drain_reason="",
            drain_requested_at=None,
            drain_requested_by=None,
            drained_by=None,
        )
    for name, value in fields.items():
        setattr(node, name, value)
    node.save(update_fields=list(fields))
    from scheduling import dispatch

    dispatch.enqueue_drain(node)
    return node


@transaction.atomic
def apply_protection_exception(job_id: int, protected_s: int, source: str) -> Job:
    """An approved extended_protection exception: the job may be protected for ``protected_s``
    from each start (beyond the 8 h cap). A running job's current protection is extended now,
    and its lien grows to cover the extra protected time (a pending job's lien is taken at
    start for its whole protection). Raises budgets' InsufficientFunds, writing nothing, when
    its budget chain cannot cover that."""
    from scheduling import liens

    job = Job.objects.select_for_update().get(pk=job_id)
    fields = {"max_protection_s": protected_s, "protection_source": source[:100]}
    if job.state == Job.State.RUNNING and job.started_at and job.funded:  # unfunded: never
        until = job.started_at + timedelta(seconds=protected_s)
        if job.project_id is not None and until > (job.protected_until or job.started_at):
            liens.extend_protection_lien(job, until)
        fields["protected_until"] = until
    return _change_protection(
        job, fields, f"protection extended to {protected_s / 3600:g} h by {source}"
    )


@transaction.atomic
def revoke_protection_exception(job_id: int, source: str) -> Job:
    """The exception expired or was withdrawn: back to the job's own contract. A running job
    keeps at most its declared minimum runtime of protection from its current start, and its
    lien shrinks to what that protection still needs (``job.lien_released`` says how much
    went back to the budget, for the exception's record)."""
    from scheduling import liens

    job = Job.objects.select_for_update().get(pk=job_id)
    if job.protection_source != source[:100] and (
        job.protection_source.startswith("exception #") or job.max_protection_s is None
    ):
        # Another exception's extension is in force now: it is not this one's to end. A
        # source that names no exception (the job lost its funding meanwhile, "none (funding
        # ran out)") still carries this one's extension in max_protection_s, which must end
        # here, or every later start would be protected, and held a lien, for its hours.
        return job
    unfunded = job.state == Job.State.RUNNING and not job.funded  # keeps saying why
    fields = {
        "max_protection_s": None,
        "protection_source": job.protection_source if unfunded else "contract",
    }
    message, released = f"{source} ended; protection back to the job's contract", 0
    if job.state == Job.State.RUNNING and job.started_at and job.funded:
        contract_end = job.started_at + timedelta(seconds=job.min_runtime_s)
        fields["protected_until"] = min(job.protected_until or contract_end, contract_end)
        released = liens.shrink_protection_lien(job, fields["protected_until"])
        if released:
            message += f"; its lien gives {released} cost-GPU-seconds back to the budget"
    job = _change_protection(job, fields, message)
    job.lien_released = released
    return job


def _change_protection(job: Job, fields: dict, message: str) -> Job:
    """Write the protection ``fields`` of a locked job and say so on its timeline."""
    Job.objects.filter(pk=job.pk).update(**fields)
    JobEvent.objects.create(job=job, at=timezone.now(), kind="protection", message=message)
    job.refresh_from_db()
    return job


@transaction.atomic
def hold_reservation(ref: str, cluster, project, gpus: int, starts_at, ends_at, source: str):
    """Hold ``gpus`` on ``cluster`` for ``project`` from ``starts_at`` to ``ends_at`` (the
    engine clears capacity before the start without cutting protected work). Idempotent."""
    from scheduling.models import Reservation

    reservation, _ = Reservation.objects.update_or_create(
        ref=ref,
        defaults=dict(
            cluster=cluster,
            project=project,
            gpus=gpus,
            starts_at=starts_at,
            ends_at=ends_at,
            source=source[:100],
            released_at=None,
        ),
    )
    return reservation


@transaction.atomic
def release_reservation(ref: str, now=None) -> bool:
    from scheduling.models import Reservation

    return bool(
        Reservation.objects.filter(ref=ref, released_at__isnull=True).update(
            released_at=now or timezone.now()
        )
    )
