"""Engine decisions → database, inside the pass's transaction.

Nothing here talks to a backend: dispatch tasks are enqueued with ``transaction.on_commit`` so a
backend only ever hears about decisions that were committed.
"""

from __future__ import annotations

import dataclasses
import secrets
from datetime import datetime

from scheduling import accounting, bulk_writes, dispatch, liens, preemption_cost
from scheduling.engine import model as m
from scheduling.live_jobs import micros
from scheduling.models import Job, JobEvent, Node
from scheduling.snapshot import DISPLACED, SnapshotContext, from_epoch
from scheduling.transitions import transition, transition_many


def _apply_preemption(job: Job, decision: m.Preempt, now: datetime) -> None:
    # The snapshot's row may be stale: charging may have advanced last_charged_at since. Close
    # the run on the locked, current row so the interval up to now is charged exactly once.
    locked = (
        Job.objects.select_for_update(of=("self",))
        .select_related("project", "owner", "cluster")
        .get(pk=job.pk)
    )
    if locked.state != Job.State.RUNNING or locked.attempt_key != job.attempt_key:
        return  # it ended meanwhile (reconcile closed it): nothing left to preempt
    job = locked
    lost = preemption_cost.lost_gpu_seconds(job, now)  # of the run as it was before closing
    accounting.close_run(job, now)
    transition(
        job,
        Job.State.PREEMPTED,
        now,
        decision.reason,
        event={"lost_gpu_seconds": lost},
        ended_at=now,
        run_seconds_done=job.run_seconds_done,
        explanation={},
    )
    dispatch.enqueue_preempt(job)


def _liens_fail(jobs: dict, starts: list[m.Start], now: datetime) -> set[str]:
    """Hold the funded starts' liens before anything else of the pass is written. Inside the
    pass transaction it locks their budget chains, so a second cluster's pass waits for this
    one to commit and then sees the spent balance. Returns the starts whose balance is gone."""
    for decision in starts:  # priced by where it lands
        jobs[decision.job_id].nodes = [[name, gpus] for name, gpus in decision.nodes]
    protected = [
        (jobs[d.job_id], max(0, int(d.protected_until_s - now.timestamp()))) for d in starts
    ]
    failed = liens.hold_start_liens(protected)
    return {d.job_id for d in starts if jobs[d.job_id].pk in failed}


def _not_started(jobs: list[Job]) -> None:
    """Funded starts whose lien failed: they stay pending, nobody is preempted for them, and
    the next pass decides again on the real balance (maybe unfunded)."""
    if not jobs:
        return
    unpriced = [job for job in jobs if getattr(job, "unpriced", None)]
    for job in unpriced:  # its nodes were relabelled to an unpriced type as the pass decided
        Job.objects.filter(pk=job.pk).update(
            pending_code="Resources",
            pending_message=f"The nodes chosen for it have no price now ({job.unpriced}); "
            "the next pass places it again.",
        )
    Job.objects.filter(pk__in=[job.pk for job in jobs if job not in unpriced]).update(
        pending_code="Unfunded",
        pending_message="Its budget was spent by another pass at the same moment; the next "
        "pass decides again on what is left.",
    )


def _apply_defund(job: Job, decision: m.Defund, now: datetime) -> None:
    locked = (
        Job.objects.select_for_update(of=("self",))
        .select_related("project", "owner", "cluster")
        .get(pk=job.pk)
    )
    if locked.state != Job.State.RUNNING or not locked.funded:
        return
    accounting.defund(locked, now, decision.path)
    job.funded, job.funding_ended_at = False, locked.funding_ended_at


def _start_fields(job: Job, decision: m.Start, now: datetime) -> dict:
    attempt = job.attempt + 1
    return dict(
        nodes=[[name, gpus] for name, gpus in decision.nodes],
        started_at=now,
        first_started_at=job.first_started_at or now,
        ended_at=None,
        funded=decision.funded,
        protected_until=from_epoch(decision.protected_until_s),
        attempt=attempt,
        # Unguessable: no one can plant a backend job under a start's key before Allot makes it.
        attempt_key=f"{job.pk}-{attempt}-{secrets.token_hex(8)}",
        external_id="",
        dispatched=False,
        last_charged_at=now,
        funding_ended_at=None,
        pending_code="",
        pending_message="",
        queue_position=None,
        estimated_start=None,
        low_utilization_since=None,
    )


def _apply_starts(starts: list[tuple[Job, m.Start]], now: datetime) -> None:
    """Every start of the pass: one conditional UPDATE of the rows, one INSERT of their
    events (``transition_many``), and one dispatch message for all of them, sent after
    commit (``dispatch.enqueue_starts``)."""
    moves = []
    for job, decision in starts:
        where = ", ".join(name for name, _ in decision.nodes)
        funding = (
            "funded by " + job.project.slug_path if decision.funded and job.project else "unfunded"
        )
        moves.append((job, f"started on {where} ({funding})", _start_fields(job, decision, now)))
    transition_many(moves, Job.State.RUNNING, now)
    dispatch.enqueue_starts([job for job, _ in starts])


def _remember_displacements(
    ctx: SnapshotContext, decisions: m.Decisions, now: datetime, unfunded: frozenset = frozenset()
) -> None:
    """Persist this pass's preemptions for standing on the victims' timelines; the next
    snapshot reads them back (snapshot._displacements) so the displacer is not displaced
    back by the victim's side of the tree while the memory lasts."""
    known = set(ctx.snapshot.displacements)
    rows = [
        JobEvent(
            job_id=int(d.victim_id),
            at=now,
            kind=DISPLACED,
            message=f"preempted for standing by job #{d.by_id} ({d.by_project})",
        )
        for d in decisions.displacements
        if d not in known and d.victim_id in ctx.jobs and d.by_id not in unfunded
    ]
    if rows:
        JobEvent.objects.bulk_create(rows)


def _explanation_json(info: m.Explanation, job: Job) -> dict:
    return {
        "funded": info.funded,
        "funding_chain": list(info.funding_chain),
        "gpu_hours_per_hour": info.gpu_hours_per_hour,
        "protected_until": from_epoch(info.protected_until_s).isoformat()
        if from_epoch(info.protected_until_s)
        else None,
        # The engine knows "an exception" for a run it just started; the job row names which.
        "protection_source": job.protection_source
        if info.protection_source == "exception"
        else info.protection_source,
        "standing": [
            {
                "path": s.path,
                "share": s.share,
                "usage_share": s.usage_share,
                "level_fair_share": None
                if s.level_fair_share == float("inf")
                else s.level_fair_share,
            }
            for s in info.standing
        ],
        "preemptible_by": info.preemptible_by,
    }


def _changed_reports(ctx: SnapshotContext, decisions: m.Decisions, skip: set[str]) -> list:
    """The waiting jobs' report rows (id, code, message, position, estimate) that differ from
    what the pass read: only those are written. Compared on the rows the snapshot read
    (``LiveJobs.report``), so no model instance is built for a waiting job."""
    report, built, pending = ctx.jobs.report, ctx.jobs.built, Job.State.PENDING.value
    changed = []
    for job_id, info in decisions.pending.items():
        read = report(job_id)
        if read is None or read[0] != pending or job_id in skip:
            continue
        _, code, message, position, estimate = read
        new_estimate = from_epoch(info.estimated_start_s)
        new_message = info.message[:300]
        if (
            info.position == position
            and info.code == code
            and new_message == message
            and (estimate is None if new_estimate is None else micros(new_estimate) == estimate)
        ):
            continue  # write only what changed
        changed.append((int(job_id), info.code, new_message, info.position, new_estimate))
        job = built.get(job_id)
        if job is not None:  # keep an instance the pass holds in step with its row
            job.pending_code, job.pending_message = info.code, new_message
            job.queue_position, job.estimated_start = info.position, new_estimate
    return changed


def split_decisions(decisions: m.Decisions, size: int) -> list[m.Decisions]:
    """The decisions in parts of at most ``size`` starts, for a pass that applies them in one
    short write transaction each (SQLite, where a transaction holds the whole database:
    ``passes.run_pass_optimistic``). Each part carries the preemptions and displacements made
    for its own starts; the first also the defunds and the preemptions made for no start
    (drains). Every part is sound alone: starting fewer of the decided jobs never overbooks a
    node. Only the last is applied with ``final=True``: reasons, explanations and drain times
    describe the whole pass."""
    starts = decisions.starts
    if len(starts) <= size:
        return [decisions]
    groups = [starts[i : i + size] for i in range(0, len(starts), size)]
    everyone = {d.job_id for d in starts}
    parts = []
    for index, group in enumerate(groups):
        mine = {d.job_id for d in group}

        def ours(by_id, first=index == 0, mine=mine):
            return by_id in mine or (first and by_id not in everyone)

        parts.append(
            dataclasses.replace(
                decisions,
                starts=group,
                preemptions=tuple(p for p in decisions.preemptions if ours(p.by_job_id)),
                displacements=tuple(d for d in decisions.displacements if ours(d.by_id)),
                defunded=decisions.defunded if index == 0 else (),
            )
        )
    return parts


def apply_decisions(
    ctx: SnapshotContext, decisions: m.Decisions, now: datetime, cluster, *, final: bool = True
) -> dict:
    """Write one pass's decisions (or a part of them, ``split_decisions``: then the reasons,
    explanations and drain times only with the last part, ``final``). Returns counts for the
    pass log."""
    jobs = ctx.jobs
    unfunded = _liens_fail(jobs, [d for d in decisions.starts if d.funded], now)
    for decision in decisions.defunded:
        _apply_defund(jobs[decision.job_id], decision, now)
    for decision in decisions.preemptions:
        if decision.by_job_id not in unfunded:  # no preemption on behalf of an unfunded start
            _apply_preemption(jobs[decision.job_id], decision, now)
    _not_started([jobs[d.job_id] for d in decisions.starts if d.job_id in unfunded])
    _apply_starts([(jobs[d.job_id], d) for d in decisions.starts if d.job_id not in unfunded], now)
    _remember_displacements(ctx, decisions, now, unfunded)
    started = {d.job_id for d in decisions.starts} - unfunded
    counts = {"started": len(started), "preempted": len(decisions.preemptions), "waiting": 0}
    if not final:
        return counts

    bulk_writes.write_report(_changed_reports(ctx, decisions, started | unfunded))

    explained = []
    for job_id, info in decisions.explanations.items():
        if job_id not in jobs or jobs.value(job_id, "state") != Job.State.RUNNING:
            continue
        job = jobs[job_id]
        explanation = _explanation_json(info, job)
        if explanation != job.explanation:
            job.explanation = explanation
            explained.append(job)
    bulk_writes.write_explanations(explained)

    drained = []
    for node in Node.objects.filter(cluster=cluster, drained=True):
        drained_by = from_epoch(decisions.drains.get(node.name, now.timestamp()))
        if node.drained_by != drained_by:
            node.drained_by = drained_by
            drained.append(node)
    Node.objects.bulk_update(drained, ["drained_by"])
    return counts | {"waiting": len(decisions.pending)}
