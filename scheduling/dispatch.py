"""Committed decisions → backend calls, through Celery tasks enqueued after commit.

Every start carries an attempt key (``<job id>-<attempt>-<random>``, unguessable); backends
refuse to launch the same key twice, so a retried or duplicated dispatch never starts a job
twice.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from django.db import connection, transaction
from django.utils import timezone

from core.faults import fault_point
from core.logs import event
from core.sqlite import locks
from scheduling import enqueue
from scheduling.backends.base import (
    Backend,
    BackendError,
    BackendUnavailable,
    LaunchSpec,
    RemoteJob,
    RemoteState,
    get_backend,
)
from scheduling.models import Cluster, Job, Node

log = logging.getLogger(__name__)
DISPATCH_LOCK = 0x616C6C6F  # "allo": the advisory-lock namespace of dispatch, keyed by job id


def backend_for(cluster: Cluster) -> Backend:
    return get_backend(cluster.backend, cluster.name, cluster.options, tag_secret(cluster.name))


def tag_secret(cluster_name: str) -> bytes:
    """The key that signs this cluster's backend tags, derived from SECRET_KEY: only Allot can
    write a tag that its backends will adopt."""
    from django.utils.crypto import salted_hmac

    return salted_hmac("allot.backend-tag", cluster_name, algorithm="sha256").digest()


def launch_spec(job: Job) -> LaunchSpec:
    """What the backend needs to start ``job``, as its owner's POSIX account. A job on a real
    cluster whose owner has no account (removed after submission) is refused here."""
    from scheduling import identity

    why = identity.problem(job.owner, job.cluster)
    if why:
        raise BackendError(why)
    account = identity.account_of(job.owner)
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
        env=dict(job.env or {}),
        sim_duration_s=remaining,
        posix_user=account.name if account else "",
        uid=account.uid if account else None,
        gid=account.gid if account else None,
    )


def start_on_backend(job_id: int, attempt_key: str) -> bool:
    """Launch one committed start. Idempotent: returns False if it no longer applies.

    One dispatcher per job at a time: the pass's dispatch task and reconcile's redispatch of
    the same start can run at once, and on Slurm both would ``sbatch`` before either sees the
    other's job; if the caller of the second then died before cancelling its copy, the attempt
    ran twice. The second waits, then finds the first's job by its attempt key."""
    with _dispatch_lock(job_id):
        return _start_on_backend(job_id, attempt_key)


def settled_dispatch(job_id: int) -> Job:
    """The job once no dispatch of its attempt is in flight. The stop of a preempted attempt
    asks the backend whether it knows the attempt, and a dispatch sent before the preemption
    may be submitting it at that moment: waiting for the dispatch lock lets that dispatch land
    first (its submit done, ``dispatched`` recorded), and a dispatch that takes the lock after
    this finds the attempt stopped and sends nothing. So the backend's answer and the row's
    ``dispatched`` agree: an attempt the backend does not know and that was never dispatched
    never ran."""
    with _dispatch_lock(job_id):
        return Job.objects.select_related("cluster").get(pk=job_id)


@contextmanager
def _dispatch_lock(job_id: int) -> Iterator[None]:
    """On PostgreSQL a transaction-level advisory lock: released at commit or rollback, and when
    a killed worker's connection drops; two jobs sharing a key only wait for each other.

    On SQLite a file lock (core.sqlite.locks), released likewise, and no transaction around
    it: there every transaction holds the database's only write lock from its BEGIN, and a
    dispatch that held it through the backend's submit stopped every writer of every process
    (passes, syncs, web requests) for as long as the submit took: an unresponsive Slurm
    controller (30 s per command) outlasts the 20 s busy timeout, "database is locked"."""
    if connection.vendor == "postgresql":
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_advisory_xact_lock(%s, %s)", [DISPATCH_LOCK, job_id % 2**31]
                )
            yield
    else:
        with locks.held(connection, "dispatch", job_id):
            yield


def _start_on_backend(job_id: int, attempt_key: str) -> bool:
    job = Job.objects.select_related("cluster", "owner", "project").get(pk=job_id)
    if job.state != Job.State.RUNNING or job.attempt_key != attempt_key:
        return False
    fault_point("dispatch.before_submit")
    try:
        remote = backend_for(job.cluster).submit(launch_spec(job))
    except BackendUnavailable:
        raise  # nothing was decided: the task retries with backoff
    except BackendError as exc:  # refused: this request will never succeed as it is
        refuse_start(job.pk, attempt_key, exc)
        return False
    fault_point("dispatch.after_submit")  # launched, not yet recorded
    Job.objects.filter(pk=job.pk, attempt_key=attempt_key).update(
        dispatched=True, external_id=remote.external_id
    )
    event(log, "dispatch", cluster=job.cluster.name, job=job.pk, attempt=attempt_key,
          external_id=remote.external_id)  # fmt: skip
    return True


@transaction.atomic
def refuse_start(job_id: int, attempt_key: str, error: Exception) -> bool:
    """The backend refused to start this attempt: the job fails with the backend's words on
    it (its page shows them), charged only for the time it held its GPUs. Other jobs are not
    concerned."""
    from scheduling import accounting
    from scheduling.transitions import transition

    job = (
        Job.objects.select_for_update(of=("self",))
        .select_related("project", "owner", "cluster")
        .get(pk=job_id)
    )
    if job.state != Job.State.RUNNING or job.attempt_key != attempt_key:
        return False
    message = str(error)[:2000]
    event(log, "dispatch_refused", logging.WARNING, cluster=job.cluster.name, job=job_id,
          attempt=attempt_key, error=message)  # fmt: skip
    now = timezone.now()
    accounting.close_run(job, now)
    transition(
        job,
        Job.State.FAILED,
        now,
        f"the cluster refused to start it: {message}"[:400],
        ended_at=now,
        last_error=message,
        explanation={},
    )
    return True


def note_error(job_id: int, what: str, error: Exception) -> None:
    """Record a backend refusal that concerns one job (a stop that failed, ...) on that job,
    where its page shows it; the job's state is left for the next sync to settle."""
    message = f"{what}: {error}"[:2000]
    log.warning("job %s: %s", job_id, message)
    Job.objects.filter(pk=job_id).exclude(last_error=message).update(last_error=message)


def stop_on_backend(job_id: int, attempt_key: str, cancel: bool = False) -> None:
    """Stop a preempted or cancelled attempt, then requeue a preempted job. A refusal is
    recorded on the job and the job is not requeued (it may still run there): the next sync
    tries the stop again."""
    job = settled_dispatch(job_id)
    backend = backend_for(job.cluster)
    # Asked first: the attempt may have ended on its own before Allot stopped it (during an
    # outage, or while Slurm still showed it COMPLETING); it is then charged to its real end.
    remote = _find_remote(backend, attempt_key)
    if remote is not None:
        settle_stopped_attempt(job.pk, remote)
    if remote is not None and remote.state in ENDED_ON_ITS_OWN:
        external = ""  # nothing left to stop there
    elif job.attempt_key == attempt_key:
        external = job.external_id or (remote.external_id if remote else "")
    else:  # a late stop (a redelivered task): the job's external id is a newer attempt's
        external = remote.external_id if remote else ""
    if external:
        try:
            (backend.cancel if cancel else backend.preempt)(job.pk, external)
        except BackendUnavailable:
            raise  # nothing was decided: the task retries with backoff
        except BackendError as exc:
            note_error(job.pk, "cancelling" if cancel else "preempting", exc)
            return
    fault_point("stop.after_backend")  # stopped on the backend, not yet requeued
    if job.state == Job.State.PREEMPTED and job.attempt_key == attempt_key:
        requeue_preempted(job.pk, attempt_key, forgotten=remote is None)


@transaction.atomic
def requeue_preempted(job_id: int, attempt_key: str, forgotten: bool = False) -> None:
    """Requeue a preempted job whose attempt is stopped. ``forgotten``: the backend, asked
    just before, no longer knows that attempt (it forgot a job that ended during an outage,
    or lost it), so the attempt is first settled to where the backend last confirmed it
    running (``settling.settle_forgotten_attempt``), in the same transaction."""
    from scheduling import settling
    from scheduling.transitions import transition

    requeue = Job.objects.select_for_update(of=("self",)).select_related("cluster").get(pk=job_id)
    if requeue.state == Job.State.PREEMPTED and requeue.attempt_key == attempt_key:
        if forgotten:
            settling.settle_forgotten_attempt(requeue)
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


def _find_remote(backend: Backend, attempt_key: str) -> RemoteJob | None:
    for remote in backend.sync():
        if remote.attempt_key == attempt_key:
            return remote
    return None


ENDED_ON_ITS_OWN = (RemoteState.COMPLETED, RemoteState.FAILED)
# Still there as it was launched, without a start: queued in Slurm, pods bound but not started
# (an image pull). Not a stopped attempt (suspended, deleted), whose start is gone with its pods.
NOT_STARTED_YET = (RemoteState.PENDING, RemoteState.RUNNING)


@transaction.atomic
def settle_stopped_attempt(job_id: int, remote: RemoteJob) -> int:
    """The backend reports an attempt Allot preempted or cancelled. When it had finished on its
    own, at ``remote.ended_at``: give back what was charged beyond that real end
    (``settling.settle_late_end``; once only), while the job's current attempt is that one
    (preempted, cancelled, or requeued and not restarted); a preempted one then ends as the
    backend says instead of running again (``_close_stopped``). A real start the backend
    reports and no sync had confirmed (a dispatch sent late) is confirmed first, so charges,
    progress and the run's length count from it (``settling.confirm_stopped_start``). An
    earlier attempt of a job restarted since is settled up to the newer attempt's start, whose
    charges are not its own (``settling.settle_earlier_attempt``). Returns the
    cost-GPU-seconds given back."""
    from scheduling import settling

    ended_on_its_own = remote.state in ENDED_ON_ITS_OWN and remote.ended_at is not None
    never_started = remote.started_at is None and remote.state in NOT_STARTED_YET
    if not ended_on_its_own and remote.started_at is None and not never_started:
        return 0
    job = Job.objects.select_for_update(of=("self",)).filter(pk=job_id).first()
    if job is None:
        return 0
    if never_started:
        return settling.settle_unstarted_attempt(job, remote.attempt_key)
    current = job.attempt_key == remote.attempt_key
    stopped = (Job.State.PREEMPTED, Job.State.CANCELLED, Job.State.PENDING)
    stopped_at = job.ended_at
    if current and job.state in stopped and remote.started_at is not None:
        # Whatever became of it since (still stopping, cancelled, ended on its own), the
        # attempt ran from the start the backend reports: a later one than the pass decided
        # (a dispatch sent late, a job Slurm queued) that no sync confirmed before Allot
        # stopped it is confirmed now, unless the stop came first (it never ran then).
        started = datetime.fromtimestamp(remote.started_at, tz=UTC)
        if stopped_at is None or started < stopped_at:
            settling.confirm_stopped_start(job, started)
    if not ended_on_its_own:
        return 0
    ended = datetime.fromtimestamp(remote.ended_at, tz=UTC)
    if not current:
        # A pass restarted the job before the backend reported this attempt's real end.
        earlier = attempt_of(remote.attempt_key, job.pk)
        return settling.settle_earlier_attempt(job, earlier, ended) if earlier else 0
    if job.state not in stopped:
        return 0
    given = settling.settle_late_end(job, ended)
    if job.state != Job.State.CANCELLED and stopped_at is not None and ended <= stopped_at:
        _close_stopped(job, remote, ended, stopped_at)
    return given


def _close_stopped(job: Job, remote: RemoteJob, ended: datetime, stopped_at: datetime) -> None:
    """A preempted attempt whose work had already ended on its own before Allot's stop (during
    an outage, or while Slurm still showed it COMPLETING) is not requeued to run again: the
    job ends as the backend says (completed, or failed with its exit code) at that real end,
    and a resumable job's progress counts only to it. The caller holds the row."""
    from scheduling.transitions import transition

    done = job.run_seconds_done
    if job.resumable and job.started_at is not None:
        done = max(0, done - int((stopped_at - max(ended, job.started_at)).total_seconds()))
    ok = remote.state == RemoteState.COMPLETED
    transition(
        job,
        Job.State.COMPLETED if ok else Job.State.FAILED,
        ended,
        "its work had already finished on the cluster before Allot preempted it: not run again"
        if ok
        else f"it had already failed on the cluster (exit {remote.exit_code}) before Allot "
        "preempted it: not run again",
        ended_at=ended,
        exit_code=remote.exit_code,
        run_seconds_done=done,
        pending_code="",
        pending_message="",
        explanation={},
    )


def attempt_of(attempt_key: str, job_id: int) -> int | None:
    """The attempt number in one of ``job_id``'s attempt keys (``<job id>-<attempt>-<random>``,
    made by ``apply._apply_start``); None for a key of another job or of another form."""
    parts = attempt_key.split("-")
    if len(parts) != 3 or parts[0] != str(job_id) or not parts[1].isdigit():
        return None
    return int(parts[1])


def enqueue_start(job: Job) -> None:
    enqueue.start(job.pk, job.attempt_key)


# Starts per dispatch message: a pass's starts go out in messages of at most this many, so a
# fill of a large cluster is a few messages (not one per job) that several workers can share.
STARTS_PER_MESSAGE = 64


def enqueue_starts(jobs: list[Job]) -> None:
    """Dispatch a pass's starts after commit, ``STARTS_PER_MESSAGE`` to a message."""
    pairs = [(job.pk, job.attempt_key) for job in jobs]
    for begin in range(0, len(pairs), STARTS_PER_MESSAGE):
        enqueue.starts(pairs[begin : begin + STARTS_PER_MESSAGE])


def start_many_on_backend(pairs: list[tuple[int, str]]) -> int:
    """Launch the starts of one dispatch message, one after another (each as
    ``start_on_backend``: its own lock). A start the backend cannot take
    now (BackendUnavailable) goes on alone, as its own retried ``dispatch_start`` task, so
    one unreachable moment neither drops nor repeats the others. Returns how many launched."""
    launched = 0
    for job_id, attempt_key in pairs:
        try:
            launched += bool(start_on_backend(job_id, attempt_key))
        except BackendUnavailable:
            enqueue.start(job_id, attempt_key)
        except Exception:  # as a failed task of its own: the other starts still go out
            log.exception("job %s: dispatching its start failed", job_id)
    return launched


def enqueue_preempt(job: Job) -> None:
    enqueue.stop(job.pk, job.attempt_key, cancel=False)


def enqueue_cancel(job: Job) -> None:
    enqueue.stop(job.pk, job.attempt_key, cancel=True)


def enqueue_drain(node: Node) -> None:
    enqueue.mirror_drain(node.pk)
