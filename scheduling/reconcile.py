"""Repair any gap between the database and what a backend reports.

Runs after every backend sync. The database is the source of truth for decisions; the backend
for what actually runs:

1. a committed start the backend never heard of (the worker died between commit and dispatch)
   is dispatched again — with the same attempt key, so never twice — and starts no earlier
   than that: its start moves there (charges before it given back);
2. a dispatched attempt the backend lost (still missing when asked again) is requeued;
3. an attempt the backend reports finished is closed and charged to its end;
4. a preempted attempt the backend still runs is stopped again, then requeued (one it no
   longer knows is first settled, charges and progress, to the last sync, as in 2);
5. a running backend job whose Allot job is over (cancelled, superseded) is cancelled;
6. an attempt Allot preempted or cancelled that the backend reports finished on its own,
   earlier, is charged to that real end (what was charged beyond it is given back, once),
   also when a pass has started the job again since (up to the newer attempt's start).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db import transaction
from django.utils import timezone

from core.faults import fault_point
from core.logs import event
from scheduling import accounting, preemption_cost
from scheduling.backends.base import (
    Backend,
    BackendError,
    BackendUnavailable,
    RemoteJob,
    RemoteState,
)
from scheduling.dispatch import (
    ENDED_ON_ITS_OWN,
    attempt_of,
    backend_for,
    note_error,
    requeue_preempted,
    settle_stopped_attempt,
    settled_dispatch,
    start_on_backend,
)
from scheduling.models import Cluster, Job
from scheduling.telemetry import tell_owner, utilization_changes
from scheduling.transitions import transition

log = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    redispatched: list[int] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    settled: list[int] = field(default_factory=list)  # charged back to an earlier real end


def _settle_stopped(remote_jobs: list[RemoteJob], live_keys: set[str], report) -> None:
    """Attempts Allot cancelled, or preempted and already requeued, are not live any more;
    if the backend reports one finished on its own before Allot's stop was charged to, it is
    charged to that real end. Two queries for the candidates; each settled with its row locked."""
    ended = {
        r.attempt_key: r
        for r in remote_jobs
        if r.state in ENDED_ON_ITS_OWN and r.ended_at is not None and r.attempt_key not in live_keys
    }
    if not ended:
        return
    stopped = Job.objects.filter(
        attempt_key__in=ended, state__in=[Job.State.CANCELLED, Job.State.PENDING]
    ).values_list("pk", "attempt_key", "state", "last_charged_at", "ended_at")
    for pk, key, state, charged_to, stopped_at in stopped:
        real_end = datetime.fromtimestamp(ended[key].ended_at, tz=UTC)
        # charged beyond its real end, or requeued though its work was done (not run again)
        overcharged = charged_to is not None and real_end < charged_to
        done = state == Job.State.PENDING and stopped_at is not None and real_end <= stopped_at
        if (overcharged or done) and settle_stopped_attempt(pk, ended[key]):
            report.settled.append(pk)
    # Attempts Allot stopped while they still showed running (Slurm's COMPLETING) and whose
    # job a pass has restarted since: settled up to the newer attempt's start. Rare, and
    # found with one more query (a job's attempt number against the one in the key).
    attempts = dict(
        Job.objects.filter(pk__in={r.job_id for r in ended.values()}).values_list("pk", "attempt")
    )
    for key, remote in ended.items():
        number = attempt_of(key, remote.job_id)
        if number is not None and number < attempts.get(remote.job_id, 0):
            if settle_stopped_attempt(remote.job_id, remote):
                report.settled.append(remote.job_id)


@transaction.atomic
def _finish(job_id: int, remote: RemoteJob) -> bool:
    job = (
        Job.objects.select_for_update(of=("self",))
        .select_related("project", "owner", "cluster")
        .get(pk=job_id)
    )
    if job.state != Job.State.RUNNING or job.attempt_key != remote.attempt_key:
        return False
    _confirm_start(job, remote)
    now = _real_end(job, remote)
    accounting.close_run(job, now)  # charges beyond the real end are reversed here
    fault_point("reconcile.finish_charged")  # charged, not yet closed: must roll back
    ok = remote.state == RemoteState.COMPLETED
    target = Job.State.COMPLETED if ok else Job.State.FAILED
    message = "finished" if ok else f"failed on the backend (exit {remote.exit_code})"
    transition(job, target, now, message, ended_at=now, exit_code=remote.exit_code, explanation={})
    return True


def _real_end(job: Job, remote: RemoteJob | None) -> datetime:
    """When the attempt really ended: the backend's word where it has one (it may be long past,
    if the backend was unreachable meanwhile), never before the run started."""
    now = timezone.now()
    if remote is not None and remote.ended_at is not None:
        ended = datetime.fromtimestamp(remote.ended_at, tz=UTC)
        now = max(min(now, ended), job.started_at or ended)
    return now


def _last_seen_running(job: Job) -> datetime:
    """A lost attempt's end is unknown (the backend no longer knows it: it forgot a finished
    job while it could not be asked, or lost it): it ran at least until the backend last
    confirmed what runs, the cluster's last successful sync before this one, and Allot counts
    its charges and its progress no further. Never before it started; now on a cluster
    never synced (whose lost attempts keep no progress, ``_lose``)."""
    now, seen = timezone.now(), job.cluster.last_sync_at
    if seen is None:
        return now
    return max(min(now, seen), job.started_at or seen)


def _confirm_start(job: Job, remote: RemoteJob) -> None:
    if remote.started_at is not None:
        accounting.confirm_start(job, datetime.fromtimestamp(remote.started_at, tz=UTC))


@transaction.atomic
def _lose(job_id: int, attempt_key: str, why: str, remote: RemoteJob | None = None) -> bool:
    job = (
        Job.objects.select_for_update(of=("self",))
        .select_related("project", "owner", "cluster")
        .get(pk=job_id)
    )
    if job.state != Job.State.RUNNING or job.attempt_key != attempt_key:
        return False
    if remote is not None:
        _confirm_start(job, remote)
    now = _real_end(job, remote) if remote is not None else _last_seen_running(job)
    done_before = job.run_seconds_done
    lost = preemption_cost.lost_gpu_seconds(job, now)
    accounting.close_run(job, now)
    if remote is None and job.cluster.last_sync_at is None and job.resumable:
        # The backend never confirmed this attempt running: none of its progress is known, so
        # none is kept (its charges stay provisional to now, as on any cluster never synced).
        job.run_seconds_done = done_before
        Job.objects.filter(pk=job.pk).update(run_seconds_done=done_before)
    transition(
        job,
        Job.State.PREEMPTED,
        now,
        why,
        event={"lost_gpu_seconds": lost},
        ended_at=now,
        explanation={},
    )
    transition(
        job,
        Job.State.PENDING,
        now,
        "requeued with its original submit time",
        nodes=[],
        dispatched=False,
        external_id="",
        pending_code="Priority",
        pending_message="Requeued: the cluster lost the previous attempt.",
    )
    return True


@transaction.atomic
def _started_no_earlier(job_id: int, attempt_key: str, sent: datetime) -> None:
    """Reconcile has just sent a committed start the backend never heard of, maybe hours after
    the pass decided it (the dispatch was lost, or the backend was down): the attempt cannot
    have started before ``sent``, so its start moves there, as when the backend reports a
    later start. Otherwise the decided start stands until the next sync reports the real one,
    and an attempt lost before that sync (a backend that forgot it) counted the hours between
    decision and dispatch as progress run, and kept their charges."""
    job = (
        Job.objects.select_for_update(of=("self",))
        .select_related("project", "owner", "cluster")
        .get(pk=job_id)
    )
    if job.state == Job.State.RUNNING and job.attempt_key == attempt_key:
        accounting.confirm_start(job, sent)


@transaction.atomic
def _confirm_running(job_id: int, remote: RemoteJob) -> None:
    """The backend says when the attempt really started: protection and charges count from
    then (the job row locked, so no charge interleaves)."""
    job = Job.objects.select_for_update(of=("self",)).get(pk=job_id)
    if job.state == Job.State.RUNNING and job.attempt_key == remote.attempt_key:
        _confirm_start(job, remote)


def _record_utilization(job: Job, remote: RemoteJob, now) -> None:
    if remote.started_at is not None and job.started_at is not None:
        if datetime.fromtimestamp(remote.started_at, tz=UTC) > job.started_at:
            _confirm_running(job.pk, remote)
    if remote.gpu_utilization is None:
        return  # Slurm and Kubernetes: GPU telemetry (scheduling/telemetry.py) reads it
    changes, tell = utilization_changes(job, remote.gpu_utilization, now)
    # Conditional on the reading this row was loaded with: a concurrent sync that recorded
    # one in between has counted the wasted interval already.
    updated = Job.objects.filter(pk=job.pk, utilization_at=job.utilization_at).update(
        **changes, dispatched=True, external_id=remote.external_id
    )
    if updated and tell:
        tell_owner(job, remote.gpu_utilization, changes["low_utilization_since"], now)


def reconcile_cluster(
    cluster: Cluster, remote_jobs: list[RemoteJob], backend: Backend | None = None
) -> ReconcileReport:
    report = ReconcileReport()
    backend = backend or backend_for(cluster)  # one client for the whole reconcile
    by_key = {r.attempt_key: r for r in remote_jobs}
    now = timezone.now()
    live = list(
        Job.objects.filter(
            cluster=cluster, state__in=[Job.State.RUNNING, Job.State.PREEMPTED]
        ).select_related("owner", "project")
    )
    live_keys = set()
    asked_again: dict[str, RemoteJob] | None = None
    # Preempted attempts the snapshot does not show: a dispatch may have landed after it, or
    # be landing now. Each such dispatch is let land (settled_dispatch), then the backend is
    # asked once more for all of them.
    unseen = [j.pk for j in live if j.state == Job.State.PREEMPTED and j.attempt_key not in by_key]
    asked_after_dispatch: dict[str, RemoteJob] | None = None
    for job in live:
        fault_point("reconcile.job")  # with ALLOT_FAULT_CHANCE < 1: part-way through
        live_keys.add(job.attempt_key)
        remote = by_key.get(job.attempt_key)
        with _this_job_only(job.pk, "reconcile"):
            if job.state == Job.State.PREEMPTED:
                if remote is None:
                    if asked_after_dispatch is None:
                        for pk in unseen:
                            settled_dispatch(pk)
                        asked_after_dispatch = {r.attempt_key: r for r in backend.sync()}
                    remote = asked_after_dispatch.get(job.attempt_key)
                if remote is not None and remote.state == RemoteState.RUNNING:
                    backend.preempt(job.pk, remote.external_id)
                elif remote is not None and settle_stopped_attempt(job.pk, remote):
                    report.settled.append(job.pk)
                # One the backend no longer knows is settled to where it last saw it running.
                requeue_preempted(job.pk, job.attempt_key, forgotten=remote is None)
                report.stopped.append(job.pk)
            elif remote is None:
                if not job.dispatched:
                    sent = timezone.now()
                    if start_on_backend(job.pk, job.attempt_key):
                        _started_no_earlier(job.pk, job.attempt_key, sent)
                    report.redispatched.append(job.pk)
                else:
                    # remote_jobs was read before these rows: a dispatch that landed in between
                    # is in the backend but not in the snapshot. Ask once more before calling
                    # it lost.
                    if asked_again is None:
                        asked_again = {r.attempt_key: r for r in backend.sync()}
                    if job.attempt_key in asked_again:
                        continue
                    if _lose(job.pk, job.attempt_key, "the cluster no longer knows this attempt"):
                        report.lost.append(job.pk)
            elif remote.state == RemoteState.RUNNING or remote.state == RemoteState.PENDING:
                _record_utilization(job, remote, now)
            elif remote.state in (RemoteState.COMPLETED, RemoteState.FAILED):
                if _finish(job.pk, remote):
                    report.finished.append(job.pk)
            elif remote.state in (RemoteState.PREEMPTED, RemoteState.CANCELLED):
                if _lose(
                    job.pk, job.attempt_key, f"stopped outside Allot ({remote.state})", remote
                ):
                    report.lost.append(job.pk)
    _settle_stopped(remote_jobs, live_keys, report)
    fault_point("reconcile.orphans")
    for remote in remote_jobs:
        if remote.state == RemoteState.RUNNING and remote.attempt_key not in live_keys:
            with _this_job_only(remote.job_id, f"cancelling orphan {remote.external_id}"):
                backend.cancel(remote.job_id, remote.external_id)
                report.orphans.append(remote.external_id)
    return report


@contextmanager
def _this_job_only(job_id: int, what: str):
    """A backend refusal while handling one job is recorded on that job; the loop goes on to
    the others. A backend that does not answer still stops the whole sync (nothing decided)."""
    try:
        yield
    except BackendUnavailable:
        raise
    except BackendError as exc:
        note_error(job_id, what, exc)


def sync_cluster(cluster_id: int) -> ReconcileReport | None:
    """Ask the backend what runs, repair gaps and record the backend's health."""
    cluster = Cluster.objects.get(pk=cluster_id)
    # Taken before asking: what the backend reports running was running at least until then,
    # which is how far charging may go (accounting.charge_running_jobs).
    asked_at = timezone.now()
    try:
        backend = backend_for(cluster)
        report = reconcile_cluster(cluster, backend.sync(), backend)
    except BackendError as exc:
        Cluster.objects.filter(pk=cluster_id).update(reachable=False, last_error=str(exc)[:2000])
        event(log, "reconcile_unreachable", logging.WARNING, cluster=cluster.name, error=str(exc))
        return None
    Cluster.objects.filter(pk=cluster_id).update(
        reachable=True, last_error="", last_sync_at=asked_at
    )
    event(log, "reconcile", cluster=cluster.name, **report.__dict__)
    return report
