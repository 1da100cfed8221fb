"""Settling an attempt Allot stopped (preempted, cancelled) whose work had already ended on
the backend: charges beyond the real end given back, and a start the backend reports for it
confirmed first. The attempt is closed: its lien is released, its charges stop where Allot
closed it, and each correction is appended to the ledger (reversal rows), never an edit.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from scheduling.models import Job, JobEvent


def confirm_stopped_start(job: Job, started: datetime) -> None:
    """``accounting.confirm_start`` for an attempt Allot has closed: the backend reports it
    started at ``started``, later than the pass decided (a dispatch sent late, a job Slurm
    queued), and no sync had said so before Allot stopped it. Its charges and protection
    count from the real start, and a resumable job keeps no progress for the seconds before
    it. Once only: the second time the start is the same. The caller holds the job row."""
    from scheduling import accounting

    decided, placed = job.started_at, job.nodes
    if decided is None or started - decided < timedelta(seconds=1):
        return  # the start a sync confirmed already, or the one the pass decided
    if not placed:
        # Requeued: the charges from the real start are priced by the nodes the attempt ran
        # on, which its start event names (the job's own are cleared).
        ran_on = (
            job.events.filter(kind=Job.State.RUNNING)
            .order_by("-at", "-pk")
            .values_list("nodes", flat=True)
            .first()
        )
        job.nodes = [(name, 0) for name in ran_on or []]
    try:
        accounting.confirm_start(job, started)
    finally:
        job.nodes = placed
    if not job.resumable:
        return
    counted_to = job.ended_at if job.ended_at is not None else decided  # counted to the close
    early = int((min(job.started_at, counted_to) - decided).total_seconds())
    job.run_seconds_done = max(0, job.run_seconds_done - max(0, early))
    Job.objects.filter(pk=job.pk).update(run_seconds_done=job.run_seconds_done)


def settle_unstarted_attempt(job: Job, attempt_key: str) -> int:
    """Allot stopped this attempt (cancel, preemption) and the backend, asked by the stop,
    shows it still launched but never started (pods bound but not started, a job Slurm still
    queues): charges count from the start the backend reports, and there is none, so every
    charge of the attempt since the pass decided it is given back, and a resumable job keeps
    no progress for it. Once only: the second time nothing is left to give back. The caller
    holds the job row. Returns the cost-GPU-seconds given back."""
    from budgets import ledger

    stopped = (Job.State.CANCELLED, Job.State.PREEMPTED)
    if job.attempt_key != attempt_key or job.state not in stopped or job.started_at is None:
        return 0
    if job.last_charged_at is None or job.last_charged_at <= job.started_at:
        return 0
    given = ledger.reverse_usage_since(job.pk, job.started_at)
    fields = {"last_charged_at": job.started_at}
    if job.resumable and job.ended_at is not None:
        counted = max(0, int((job.ended_at - job.started_at).total_seconds()))  # by close_run
        fields["run_seconds_done"] = max(0, job.run_seconds_done - counted)
    Job.objects.filter(pk=job.pk).update(**fields)
    for name, value in fields.items():
        setattr(job, name, value)
    JobEvent.objects.create(
        job=job,
        at=job.ended_at or job.started_at,
        kind="charges_settled",
        message="the cluster had not started this attempt when Allot stopped it: its charges "
        f"since {job.started_at:%Y-%m-%d %H:%M:%S} UTC given back ({given} cost-GPU-seconds)",
    )
    return given


def settle_late_end(job: Job, ended: datetime, *, forgotten: bool = False) -> int:
    """Allot closed this attempt itself (preemption, cancel) and charged it to that close,
    but the backend now says its work had already ended at ``ended`` (during an outage, or
    while Slurm still showed it COMPLETING). What was charged beyond ``ended`` is given back
    by reversal rows and the job's end moves there, with a timeline event. Once only: the
    second time, nothing lies beyond ``ended`` any more. The caller holds the job row and has
    checked that ``job``'s current attempt is the one that ended. ``forgotten``: the backend
    no longer knows the attempt, and ``ended`` is where it last confirmed it running
    (``settle_forgotten_attempt``); the timeline says so. Returns the cost-GPU-seconds given
    back."""
    from budgets import ledger

    if job.started_at is None or job.last_charged_at is None:
        return 0
    ended = max(ended, job.started_at)
    if ended >= job.last_charged_at:
        return 0
    given = ledger.reverse_usage_after(job.pk, ended, job.gpus)
    was = job.last_charged_at
    fields = {"last_charged_at": ended}
    if job.ended_at is not None and job.ended_at > ended:
        fields["ended_at"] = ended
    if job.funding_ended_at is not None and job.funding_ended_at > ended:
        fields["funding_ended_at"] = ended
    Job.objects.filter(pk=job.pk).update(**fields)
    for name, value in fields.items():
        setattr(job, name, value)
    if forgotten:
        message = (
            f"the cluster no longer knows this attempt, which it last confirmed running at "
            f"{ended:%Y-%m-%d %H:%M:%S} UTC, before Allot stopped it at "
            f"{was:%Y-%m-%d %H:%M:%S} UTC: charges after that given back ({given} "
            "cost-GPU-seconds)"
        )
    else:
        message = (
            f"its work had already ended at {ended:%Y-%m-%d %H:%M:%S} UTC on the cluster, "
            f"before Allot stopped it at {was:%Y-%m-%d %H:%M:%S} UTC: charges after the real "
            f"end given back ({given} cost-GPU-seconds)"
        )
    JobEvent.objects.create(job=job, at=ended, kind="charges_settled", message=message)
    return given


def settle_forgotten_attempt(job: Job) -> int:
    """Allot preempted this attempt, closing it at its stop (charges and a resumable job's
    progress counted to there), and the backend, asked since, no longer knows it: it forgot
    a job that ended during an outage (as Slurm forgets finished jobs after ``MinJobAge``), or
    lost it. Its real end is unknown, so it is settled as ``reconcile._lose`` closes a running
    attempt the backend no longer knows: it ran at least until the cluster's last successful
    sync (never before its start), and Allot counts its charges and its progress no further.
    What was charged beyond that moment is given back (``settle_late_end``: reversal rows and
    a ``charges_settled`` event), the attempt ends there, and a resumable job keeps the
    progress up to it only. On a cluster never synced, or for an attempt never dispatched (a
    pass preempted it before its dispatch was sent: the backend never had it), nothing
    confirmed the attempt running: its charges stay to the stop (the GPUs were held for it
    from the pass's decision, as for any run), and it keeps no progress.
    Nothing changes when the stop came no later than the last sync. The caller holds the job
    row, has checked that it is still preempted at this attempt, and requeues it in the same
    transaction (so this runs once per attempt). Returns the cost-GPU-seconds given back."""
    stopped, started = job.ended_at, job.started_at
    if stopped is None or started is None:
        return 0
    # Never dispatched: the backend never had it (settled_dispatch), and nothing ever
    # confirmed it running, as on a cluster never synced.
    seen = job.cluster.last_sync_at if job.dispatched else None
    if seen is not None and seen >= stopped:
        return 0
    last_seen = started if seen is None else min(max(seen, started), stopped)
    given = 0
    if seen is not None:
        given = settle_late_end(job, last_seen, forgotten=True)
    fields = {}
    if seen is not None and job.ended_at is not None and job.ended_at > last_seen:
        fields["ended_at"] = last_seen  # settle_late_end moves it only when it gave back
    if job.resumable:
        counted = max(0, int((stopped - started).total_seconds()))  # as close_run counted it
        kept = max(0, int((last_seen - started).total_seconds()))
        fields["run_seconds_done"] = max(0, job.run_seconds_done - counted + kept)
    if fields:
        Job.objects.filter(pk=job.pk).update(**fields)
        for name, value in fields.items():
            setattr(job, name, value)
    return given


def settle_earlier_attempt(job: Job, attempt: int, ended: datetime) -> int:
    """``settle_late_end`` for an attempt that is no longer the job's current one: Allot
    stopped attempt number ``attempt`` while the backend still showed it running (Slurm's
    COMPLETING), requeued it, and a pass started a newer attempt before the backend reported
    that the work had ended on its own at ``ended``. What that attempt was charged beyond
    ``ended`` is given back, up to the next attempt's start only: the charges from there on,
    the job's row and its open lien are the newer attempt's and stay as they are.

    Each start writes one "running" event (append-only), so the timeline says when attempt
    ``attempt`` and the one after it were decided. Once only, as ``settle_late_end``. The
    caller holds the job row. Returns the cost-GPU-seconds given back."""
    from budgets import ledger

    if not 1 <= attempt < job.attempt:
        return 0
    starts = list(
        job.events.filter(kind=Job.State.RUNNING)
        .order_by("at", "pk")
        .values_list("at", flat=True)[attempt - 1 : attempt + 1]
    )
    if len(starts) != 2 or not starts[0] <= ended < starts[1]:
        return 0
    began, next_start = starts
    given = ledger.reverse_usage_between(job.pk, ended, next_start, job.gpus, since=began)
    if given:
        JobEvent.objects.create(
            job=job,
            at=ended,
            kind="charges_settled",
            message=f"attempt {attempt}'s work had already ended at "
            f"{ended:%Y-%m-%d %H:%M:%S} UTC on the cluster, before Allot stopped it: charges "
            f"after the real end given back ({given} cost-GPU-seconds)",
        )
    return given
