"""What the fault checker knows about attempts: every attempt the backend knows, which attempt
keys Allot issued, and a job's runs from its timeline. Imported by the agent after
django.setup()."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timedelta

from scheduling.models import Cluster, Job, JobEvent

# Allot's attempt keys (scheduling/apply.py): job, attempt number, 16 random hex digits
ATTEMPT_KEY = re.compile(r"(?P<job>[1-9][0-9]*)-(?P<n>[1-9][0-9]*)-[0-9a-f]{16}")
SECOND = timedelta(seconds=1)
END_KINDS = {"preempted", "completed", "failed", "cancelled"}


# -- the backend's view ---------------------------------------------------------------------------
def remote_records(cluster: Cluster) -> tuple[list[dict], list[str]]:
    """Every attempt the backend knows: [{key, job_id, external_id, state, started, ended,
    backend_start (the start the backend reports to Allot)}]."""
    problems = []
    if cluster.backend == "simulated":
        from scheduling.backends.simulated import SimulatedBackend

        backend = SimulatedBackend(cluster.name, cluster.options)
        state = json.loads(backend.path.read_text()) if backend.path.exists() else {"jobs": {}}
        jobs = state.get("jobs", {})
        # Records are keyed by attempt key and numbered by launch: if every launch got its own
        # number and no record was replaced, launches == records.
        launches = state.get("next_id", 1) - 1
        if launches != len(jobs):
            problems.append(f"simulated backend: {launches} launches but {len(jobs)} attempts")
        now = time.time()
        records = []
        for key, rec in jobs.items():
            ended = rec.get("ended_wall")
            running = rec["state"] == "running"
            if running and rec.get("duration_s") is not None:  # finished, not yet noticed
                end = rec["started_wall"] + rec["duration_s"] / float(backend.speed)
                if end <= now:
                    running, ended = False, end
            records.append(
                {
                    "key": key,
                    "job_id": rec["job_id"],
                    "external_id": rec["external_id"],
                    "state": "running" if running else rec["state"],
                    "started": rec["started_wall"],
                    "backend_start": rec["started_wall"],  # what the backend reports to Allot
                    "ended": ended,
                }
            )
        return records, problems
    from scheduling.dispatch import backend_for

    records = []
    for remote in backend_for(cluster)._jobs():  # squeue: every state, for MinJobAge
        slurm_state = remote.extra.get("slurm_state") or ""
        start, end = remote.extra.get("start_time") or 0, remote.extra.get("end_time") or 0
        # A pending job's start_time is a forecast; one cancelled while pending never ran.
        ran = slurm_state != "PENDING" and bool(start) and not (end and start >= end)
        records.append(
            {
                "key": remote.attempt_key,
                "job_id": remote.job_id,
                "external_id": remote.external_id,
                "state": str(remote.state),
                "slurm_state": slurm_state,
                "started": float(start) if ran else None,
                "backend_start": remote.started_at,
                "ended": remote.ended_at,
            }
        )
    return records, problems


def runs_of(events: list[JobEvent]) -> list[dict]:
    """A job's runs from its timeline (in time order): start (the 'running' event) to the event
    that ended it; and ``charged_to``, where its charges end: that event, or — when Allot
    stopped an attempt whose work had already ended on the backend, or that the backend no
    longer knew — the real end or last sighting that its charges were settled to (the
    'charges_settled' event, timed at that moment, so between the two)."""
    runs, current = [], None
    for event in events:
        if event.kind == "running":
            current = {"start": event.at, "end": None, "charged_to": None,
                       "funded": "(funded by" in event.message}  # fmt: skip
            runs.append(current)
        elif event.kind == "charges_settled" and current is not None:
            current["charged_to"] = event.at
        elif event.kind in END_KINDS and current is not None:
            current["end"] = event.at
            current = None
    return runs


def charged_end(run: dict) -> datetime | None:
    """Where an ended run's charges end (``runs_of``): its settled real end, else the event
    that ended it; None while it runs."""
    if run["end"] is not None and run["charged_to"] is not None:
        return run["charged_to"]
    return run["end"]


def issued_attempt(job: Job | None, key: str) -> int | None:
    """The attempt number Allot gave ``key``, or None if Allot never issued it.

    Keys are ``<job>-<attempt>-<16 hex>`` (scheduling/apply.py). Allot keeps only the current
    attempt's key, so that one must match exactly; an earlier attempt's key must name this job
    and an attempt number it has used, with a well-formed random part."""
    if job is None:
        return None
    if key == job.attempt_key:
        return job.attempt
    match = ATTEMPT_KEY.fullmatch(key)
    if match is None or int(match["job"]) != job.pk:
        return None
    n = int(match["n"])
    # the current attempt's key is known: any other key with its number was never issued
    return n if 1 <= n < job.attempt else None


def run_starts(
    job: Job,
    n: int,
    runs: int,
    run: dict,
    end: datetime,
    backend_start: dict,
    charged_from: datetime | None = None,
) -> tuple[list[datetime], str]:
    """Where run ``n`` may be charged from: its pass's start, or the backend's start of that
    attempt when it came a second or more later (what confirm_start accepts), or — for a start
    reconcile sent late — the moment it was sent (reconcile moves the start there at once;
    the backend's reported start is within a second of it, which confirm_start leaves as it
    is: after it by the dispatch's delay, or before it when the backend reports whole
    seconds, as Slurm does). The last run's is known exactly: ``started_at``, which
    must be one of those; an earlier run's sending moment is read from its first charge
    (``charged_from``)."""
    decided = run["start"]
    starts = [decided]
    real = backend_start.get((job.pk, n))

    def sent_late(moment: datetime | None) -> bool:
        # The simulated backend starts at the sending (its start a few ms after); Slurm
        # reports whole seconds (its start up to a second before the moment it was sent).
        return (
            real is not None
            and moment is not None
            and decided < moment
            and abs(moment - real) < SECOND
        )

    if real is not None and real - decided >= SECOND and real <= end:
        starts.append(real)
    if n != runs and sent_late(charged_from):
        starts.append(charged_from)
    if n != runs or job.started_at is None:
        return starts, ""
    if job.started_at in starts or sent_late(job.started_at):
        return [job.started_at], ""
    if real is None and job.started_at - decided >= SECOND:  # the backend forgot the attempt
        return [job.started_at], ""
    return starts, (
        f"started_at {job.started_at:%H:%M:%S.%f} is neither the pass's start "
        f"{decided:%H:%M:%S.%f} nor the backend's {real and f'{real:%H:%M:%S.%f}'}"
    )
