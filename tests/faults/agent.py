"""The fault suite's hands and eyes inside the system under test.

The test process's own Django talks to the shared test database; the system under test uses a
private PostgreSQL that the suite restarts. So everything that reads or writes that database
(seeding, submitting, cancelling, checking the invariants) runs here, in a long-lived helper
process started with the private DATABASE_URL and CELERY_BROKER_URL, speaking JSON lines on
stdin/stdout::

    python -m tests.faults.agent            # then {"cmd": "check", "grace_s": 5} per line

Each command reconnects first (the database may have restarted since the last one) and retries
while the database does not answer.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
import traceback
from collections import defaultdict
from datetime import UTC, datetime
from decimal import Decimal

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402

django.setup()

from django.db import DatabaseError, connections  # noqa: E402
from django.utils import timezone  # noqa: E402

from budgets import services as budget_services  # noqa: E402
from budgets.models import BudgetNode, GpuType, Lien, Role, UsageEntry  # noqa: E402
from scheduling.models import Cluster, Job, JobEvent, Node  # noqa: E402
from scheduling.services import JobRequest, cancel_job, submit_job  # noqa: E402
from tests.faults import ledger_check  # noqa: E402
from tests.faults.attempts import (  # noqa: E402
    charged_end,
    issued_attempt,
    remote_records,
    run_starts,
    runs_of,
)

PROJECTS = ["nlp/olmo", "nlp/tulu", "vision/seg", ""]  # "" is unfunded work
LOST = "the cluster no longer knows this attempt"
OUTSIDE = "stopped outside Allot"  # scheduling/reconcile.py: the backend says cancelled/preempted


# -- setup ----------------------------------------------------------------------------------------
def setup(backend: str, cluster: str, options: dict, cost_factor: str) -> dict:
    from django.contrib.auth import get_user_model

    from scheduling.discovery import register_cluster
    from scheduling.models import PosixAccount

    GpuType.objects.update_or_create(name="H100", defaults={"cost_factor": Decimal(cost_factor)})
    root = budget_services.create_root(None, "Fault Lab", "org")
    budget_services.set_grant(None, root, 10_000_000)
    users = []
    for program, children in {"nlp": ["olmo", "tulu"], "vision": ["seg"]}.items():
        node = budget_services.create_node(None, root, program.title(), program)
        budget_services.set_grant(None, node, 4_000_000)
        for child in children:
            leaf = budget_services.create_node(None, node, child.title(), child)
            budget_services.set_grant(None, leaf, 1_000_000)
            user = get_user_model().objects.create_user(f"r-{child}", password="x")
            Role.objects.create(user=user, role=Role.Kind.RESEARCHER, node=leaf)
            users.append(user.username)
    users.append(get_user_model().objects.create_user("r-free", password="x").username)
    if backend != "simulated":  # jobs run as their owners: the harness's Unix accounts
        accounts = ["allot-alice", "allot-bob", "allot-carol", "allot-dave"]
        for username, account in zip(users, accounts, strict=True):
            PosixAccount.objects.create(
                user=get_user_model().objects.get(username=username), name=account
            )
    report = register_cluster(cluster, backend, {**options, "gpu_type": "H100"})
    Cluster.objects.filter(pk=report.cluster.pk).update(gpu_type="H100")
    return {"cluster": report.cluster.pk, "nodes": [n.name for n in report.nodes]}


# -- load -----------------------------------------------------------------------------------------
def _owner(project: str):
    from django.contrib.auth import get_user_model

    name = {"nlp/olmo": "r-olmo", "nlp/tulu": "r-tulu", "vision/seg": "r-seg"}.get(project)
    return get_user_model().objects.get(username=name or "r-free")


def submit(n: int, cluster: str, seed: int, sim: bool, max_s: int = 12) -> dict:
    rng = random.Random(seed)
    per_node = max(Node.objects.filter(cluster__name=cluster).values_list("gpus", flat=True))
    ids = []
    for i in range(n):
        project = rng.choice(PROJECTS)
        gpus = rng.choice([1, 2, 2, 4, 4, per_node, per_node])
        real_s = rng.randint(2, max_s)
        request = JobRequest(
            name=f"fault-{seed}-{i}",
            project=project,
            cluster=cluster,
            gpus=min(gpus, per_node),
            min_runtime_s=60,
            resumable=rng.random() < 0.7,
            # simulated: speed 60 (a real second is a simulated minute); Slurm: a real sleep
            sim_duration_s=real_s * 60 if sim else None,
            command="" if sim else f"sleep {real_s}",
        )
        ids.append(submit_job(_owner(project), request).pk)
    return {"submitted": ids}


def cancel(k: int, seed: int) -> dict:
    """Cancel up to k random unfinished jobs (their owners do it, as through the API)."""
    rng = random.Random(seed)
    candidates = list(
        Job.objects.exclude(state__in=Job.TERMINAL).values_list("pk", "owner_id", "state")
    )
    chosen = rng.sample(candidates, min(k, len(candidates)))
    done, failed = [], []
    for pk, owner_id, _state in chosen:
        from django.contrib.auth import get_user_model

        try:
            cancel_job(get_user_model().objects.get(pk=owner_id), pk)
            done.append(pk)
        except Exception as exc:  # the broker may be down: the cancel itself committed
            failed.append(f"{pk}: {type(exc).__name__}: {exc}"[:200])
    return {"cancelled": done, "errors": failed}


# -- the invariants -------------------------------------------------------------------------------
def check(cluster_name: str, grace_s: float, charge_interval_s: float, final: bool = False) -> dict:
    """Every invariant, read from one snapshot of the database (REPEATABLE READ), so that a
    charge committing between two of its queries cannot look like a ledger error."""
    from django.db import connection, transaction

    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        return _check(cluster_name, grace_s, charge_interval_s, final)


def _check(cluster_name: str, grace_s: float, charge_interval_s: float, final: bool) -> dict:
    now = timezone.now()
    cluster = Cluster.objects.get(name=cluster_name)
    factor = GpuType.objects.get(name=cluster.gpu_type).cost_factor
    jobs = {j.pk: j for j in Job.objects.filter(cluster=cluster)}
    events = defaultdict(list)
    for event in JobEvent.objects.filter(job__cluster=cluster).order_by("at", "id"):
        events[event.job_id].append(event)
    usage = defaultdict(list)
    for entry in UsageEntry.objects.filter(job_ref__in=list(jobs)).order_by("interval_start"):
        usage[entry.job_ref].append(entry)
    liens = {lien.job_ref: lien for lien in Lien.objects.filter(job_ref__in=list(jobs))}
    records, problems = remote_records(cluster)
    by_key = {r["key"]: r for r in records}
    v: list[str] = list(problems)

    def age(moment) -> float:
        if moment is None:
            return math.inf
        if isinstance(moment, datetime):
            return (now - moment).total_seconds()
        return now.timestamp() - float(moment)

    # 1. nothing lost, nothing stuck in between (and how long the longest gap is right now)
    worst = 0.0

    def between(seconds: float) -> float:
        nonlocal worst
        if seconds != math.inf:
            worst = max(worst, seconds)
        return seconds

    for job in jobs.values():
        tag = f"job {job.pk} ({job.state}, attempt {job.attempt_key or '-'})"
        if job.state == Job.State.PREEMPTED and between(age(job.ended_at)) > grace_s:
            v.append(f"{tag}: preempted {age(job.ended_at):.1f} s ago and never requeued")
        if job.state != Job.State.RUNNING:
            continue
        remote = by_key.get(job.attempt_key)
        if not job.dispatched and between(age(job.started_at)) > grace_s:
            v.append(f"{tag}: start committed {age(job.started_at):.1f} s ago, not dispatched")
        if remote is None and between(age(job.started_at)) > grace_s:
            v.append(f"{tag}: running in Allot for {age(job.started_at):.1f} s, unknown to backend")
        if (
            remote
            and remote["state"] not in ("running", "pending")
            and between(age(remote["ended"])) > grace_s
        ):
            v.append(
                f"{tag}: the backend says {remote['state']} {age(remote['ended']):.1f} s ago, "
                "Allot still says running"
            )
    lost = JobEvent.objects.filter(job__cluster=cluster, message=LOST).count()
    if lost:
        v.append(f"{lost} attempts taken for lost although the backend never lost one")
    # Nothing outside Allot stops a job here: such an end is a misread backend, and the job
    # that ran was requeued for nothing.
    outside = JobEvent.objects.filter(job__cluster=cluster, message__startswith=OUTSIDE)
    for event in outside:
        v.append(f"job {event.job_id}: {event.message} at {event.at:%H:%M:%S.%f}, nobody did")

    # 2. nothing launched twice
    running_per_job = defaultdict(list)
    started_per_key = defaultdict(list)
    keys_per_attempt = defaultdict(set)
    backend_start: dict[tuple[int, int], datetime] = {}
    for rec in records:
        job = jobs.get(rec["job_id"])
        if rec["state"] == "running":
            running_per_job[rec["job_id"]].append(rec["key"])
        if rec.get("started"):
            started_per_key[rec["key"]].append(rec["external_id"])
        n = issued_attempt(job, rec["key"])
        if n is None:
            v.append(f"backend attempt {rec['key']} ({rec['external_id']}) was never started")
            continue
        keys_per_attempt[(job.pk, n)].add(rec["key"])
        if rec["backend_start"] is not None:
            backend_start[(job.pk, n)] = datetime.fromtimestamp(rec["backend_start"], tz=UTC)
        current = job.state == Job.State.RUNNING and job.attempt_key == rec["key"]
        if rec["state"] == "running" and not current:
            over = runs_of(events[job.pk])
            ended = over[n - 1]["end"] if n - 1 < len(over) else None
            if between(age(ended)) > grace_s:
                v.append(
                    f"backend still runs {rec['key']} ({rec['external_id']}), over in Allot "
                    f"{age(ended):.1f} s ago (job {job.state})"
                )
    for job_id, keys in running_per_job.items():
        if len(keys) > 1:
            v.append(f"job {job_id}: {len(keys)} attempts running at once on the backend: {keys}")
    for key, ids in started_per_key.items():
        if len(ids) > 1:
            v.append(f"attempt {key} launched {len(ids)} times on the backend: {ids}")
    for (job_id, n), keys in keys_per_attempt.items():
        if len(keys) > 1:
            v.append(
                f"job {job_id} attempt {n} has {len(keys)} keys on the backend: {sorted(keys)}"
            )

    # 3. the ledger equals funded occupancy x cost, to the second
    charged_total = expected_total = 0
    for job in jobs.values():
        runs = runs_of(events[job.pk])
        charges, problems = ledger_check.net_charges(usage.get(job.pk, []), factor)
        v += [f"job {job.pk}: {p}" for p in problems]
        claimed = set()
        for index, run in enumerate(runs):
            end = charged_end(run)
            if end is None:  # the open run: charged up to last_charged_at
                if job.state != Job.State.RUNNING or index != len(runs) - 1:
                    v.append(f"job {job.pk}: run {index + 1} never ended but job is {job.state}")
                    continue
                end = job.last_charged_at
                # A liveness check, like the pass and sync ones below: twice the grace, so
                # one charge task late on a loaded machine is not a stalled ledger (the
                # amounts are checked to the second whatever the cadence).
                if run["funded"] and age(end) > charge_interval_s + 2 * grace_s:
                    v.append(f"job {job.pk}: not charged for {age(end):.1f} s while running")
            mine = [c for c in charges if run["start"] <= c.start < (run["end"] or now)]
            charged_from = min((c.start for c in mine if c.gpu_s), default=None)
            starts, problem = run_starts(
                job, index + 1, len(runs), run, end, backend_start, charged_from
            )
            if problem:
                v.append(f"job {job.pk} run {index + 1}: {problem}")
            claimed.update(c.pk for c in mine)
            start, seconds, expected, problems = ledger_check.check_run(
                mine, starts, end, job.gpus, run["funded"]
            )
            charged_total += seconds
            expected_total += expected
            v += [
                f"job {job.pk} run {index + 1} ({'funded' if run['funded'] else 'unfunded'}, "
                f"{job.gpus} GPUs, {start:%H:%M:%S.%f}..{end:%H:%M:%S.%f}): {p}"
                for p in problems
            ]
        stray = [c.pk for c in charges if c.pk not in claimed]
        if stray:
            v.append(f"job {job.pk}: {len(stray)} ledger entries outside any run")

    # 4. no lien left open for a job that is not running
    for job_ref, lien in liens.items():
        job = jobs[job_ref]
        if lien.released_at is None and job.state != Job.State.RUNNING:
            v.append(f"job {job_ref} is {job.state} but its lien is still open")
    for job in jobs.values():
        if job.state == Job.State.RUNNING and job.funded:
            lien = liens.get(job.pk)
            if lien is None or lien.released_at is not None:
                v.append(f"job {job.pk} runs funded without an open lien")

    # 5. the loop keeps going
    # Twice the grace: one slow pass on a loaded machine is not a stalled loop.
    if age(cluster.last_pass_at) > 2 * grace_s:
        v.append(f"no scheduling pass for {age(cluster.last_pass_at):.1f} s")
    if age(cluster.last_sync_at) > 2 * grace_s:
        v.append(f"no backend sync for {age(cluster.last_sync_at):.1f} s")
    if final:
        unfinished = [j.pk for j in jobs.values() if j.state not in Job.TERMINAL]
        if unfinished:
            v.append(f"{len(unfinished)} jobs never finished: {unfinished[:20]}")

    states = defaultdict(int)
    for job in jobs.values():
        states[job.state] += 1
    return {
        "violations": v,
        "states": dict(states),
        "attempts": sum(j.attempt for j in jobs.values()),
        "backend_attempts": len(records),
        "charged_gpu_s": charged_total,
        "expected_gpu_s": expected_total,
        "events": {
            kind: JobEvent.objects.filter(job__cluster=cluster, kind=kind).count()
            for kind in ("running", "preempted", "requeued", "completed", "cancelled", "failed")
        },
        "max_in_between_s": round(worst, 2),
        "open_liens": sum(1 for lien in liens.values() if lien.released_at is None),
        "budget_nodes": BudgetNode.objects.count(),
        "at": now.astimezone(UTC).isoformat(),
    }


def unfinished(cluster_name: str) -> dict:
    return {
        "n": Job.objects.filter(cluster__name=cluster_name).exclude(state__in=Job.TERMINAL).count()
    }


COMMANDS = {
    "setup": setup,
    "submit": submit,
    "cancel": cancel,
    "check": check,
    "unfinished": unfinished,
}


def handle(request: dict) -> dict:
    command = COMMANDS[request.pop("cmd")]
    deadline = time.monotonic() + float(request.pop("retry_s", 60))
    while True:
        connections.close_all()  # the database may have restarted since the last command
        try:
            return {"ok": True, "result": command(**request)}
        except DatabaseError as exc:
            if time.monotonic() > deadline:
                return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            time.sleep(0.5)
        except Exception as exc:
            return {
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "tb": traceback.format_exc(),
            }


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        print(json.dumps(handle(json.loads(line)), default=str), flush=True)


if __name__ == "__main__":
    main()
