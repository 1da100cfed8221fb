"""Pure translation between Slurm's text and Allot's objects, for the Slurm backend.

Comments that tag Allot's jobs, host lists, Gres strings, ``squeue --json`` and ``sacct --json``;
nodes are read in ``slurm_nodes``, ``sbatch``'s command line and script written in
``slurm_sbatch``. No subprocess here: every function is tested round-trip on captured real
output (tests/backends/fixtures/slurm/).
"""

from __future__ import annotations

import json
import re
from urllib.parse import quote, unquote

from .base import BackendError, BackendUnavailable, LaunchSpec, RemoteJob, RemoteState

_STATES = {
    **dict.fromkeys(
        ["PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"],
        RemoteState.PENDING,
    ),
    # SUSPENDED/STOPPED jobs still hold their nodes; COMPLETING ones are still cleaning up.
    **dict.fromkeys(
        ["RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT", "RESIZING", "SUSPENDED", "STOPPED"],
        RemoteState.RUNNING,
    ),
    "COMPLETED": RemoteState.COMPLETED,
    "CANCELLED": RemoteState.CANCELLED,
    # Stopped through no fault of the job: Allot may start it again.
    **dict.fromkeys(["PREEMPTED", "NODE_FAIL", "BOOT_FAIL"], RemoteState.PREEMPTED),
    **dict.fromkeys(
        ["FAILED", "TIMEOUT", "DEADLINE", "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED"],
        RemoteState.FAILED,
    ),
}
_ACTIVE = {RemoteState.PENDING, RemoteState.RUNNING}


# --- pure helpers -------------------------------------------------------------------------


def format_comment(tag: str, cluster: str, spec: LaunchSpec, **extra: str) -> str:
    """The ``--comment`` tag. Values are percent-encoded so that ``:`` and ``=`` inside an
    attempt key or a project path can never break parsing."""
    fields = {
        "cluster": cluster,
        "job": str(spec.job_id),
        "attempt": spec.attempt_key,
        "project": spec.project,
        "user": spec.user,
        **extra,
    }
    return tag + "".join(f":{k}={quote(str(v), safe='/@')}" for k, v in fields.items())


def parse_comment(comment: str | None, tag: str = "allot") -> dict[str, str] | None:
    """The fields of an Allot tag, or None for a job that is not Allot's."""
    if not comment or not comment.startswith(tag + ":"):
        return None
    fields = {}
    for part in comment[len(tag) + 1 :].split(":"):
        key, sep, value = part.partition("=")
        if sep:
            fields[key] = unquote(value)
    if not fields.get("job", "").isdigit() or "attempt" not in fields:
        return None
    return fields


def expand_hostlist(expr: str | None) -> tuple[str, ...]:
    """``node[1-3,07],gpu5`` → ``node1 node2 node3 node07 gpu5`` (zero padding kept). Slurm
    prints compressed host lists; calling ``scontrol show hostnames`` for each would cost a
    process per job."""
    if not expr or expr in {"(null)", "None"}:
        return ()
    names: list[str] = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", expr):
        names.extend(_expand_one(item))
    return tuple(names)


def _expand_one(item: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", item)
    if not match:
        return [item]
    head, tail = item[: match.start()], item[match.end() :]
    out = []
    for rng in match.group(1).split(","):
        lo, _, hi = rng.partition("-")
        width = len(lo)
        for i in range(int(lo), int(hi or lo) + 1):
            out.extend(head + str(i).zfill(width) + rest for rest in _expand_one(tail))
    return out


def slurm_duration(seconds: int) -> str:
    """``--time`` as D-HH:MM:SS (Slurm rounds up to whole minutes)."""
    days, rest = divmod(max(int(seconds), 1), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"


def exit_code_from_status(status: int | None) -> int | None:
    """squeue reports a wait(2) status: 768 is exit 3, 15 is SIGTERM (shell-style 128+15)."""
    if status is None:
        return None
    signal_no = status & 0x7F
    return 128 + signal_no if signal_no else (status >> 8) & 0xFF


def parse_gres_gpus(gres: str | None) -> tuple[int, str]:
    """GPU count and type from a node's Gres: ``gpu:8``, ``gpu:h100:8(S:0-1)``, several
    entries summed; the type is the first named one ("" when untyped)."""
    count, gpu_type = 0, ""
    for entry in (gres or "").split(","):
        parts = re.sub(r"\(.*?\)", "", entry.strip()).split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        number = parts[-1]
        if number.isdigit():
            count += int(number)
            if len(parts) >= 3 and not gpu_type:
                gpu_type = parts[1]
    return count, gpu_type


def _load_json(text: str, what: str) -> dict:
    """Slurm 22.05's ``squeue --json`` exits 0 with an empty list and an ``errors`` entry when
    the controller is down: reading it as "no jobs" would make reconcile close every job."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BackendError(f"slurm: {what} did not print JSON: {text[:200]!r}") from exc
    errors = data.get("errors") or []
    if errors:
        first = errors[0]
        raise BackendUnavailable(
            f"slurm: {what}: {first.get('description') or first.get('error') or first}"
        )
    return data


def allot_state(slurm_state: str, fields: dict[str, str]) -> RemoteState:
    """Slurm's job state → Allot's; a job Allot marked ``preempted=1`` and then cancelled (or
    requeued and held) was preempted, not stopped by a user."""
    state = _STATES.get(slurm_state, RemoteState.UNKNOWN)
    if fields.get("preempted") == "1" and state in {RemoteState.CANCELLED, RemoteState.PENDING}:
        state = RemoteState.PREEMPTED
    return state


def job_from_json(job: dict, tag: str = "allot") -> RemoteJob | None:
    """One squeue --json job → RemoteJob, or None when it carries no Allot tag."""
    fields = parse_comment(job.get("comment"), tag)
    if fields is None:
        return None
    slurm_state = str(job.get("job_state") or "")
    state = allot_state(slurm_state, fields)
    finished = state not in _ACTIVE
    return RemoteJob(
        job_id=int(fields["job"]),
        external_id=str(job["job_id"]),
        attempt_key=fields["attempt"],
        state=state,
        nodes=() if state is RemoteState.PENDING else expand_hostlist(job.get("nodes")),
        exit_code=exit_code_from_status(job.get("exit_code")) if finished else None,
        ended_at=float(job["end_time"]) if finished and job.get("end_time") else None,
        # A pending job's start_time is only Slurm's forecast; once it runs, the real start.
        started_at=_started(job.get("start_time"), state),
        extra={
            "cluster": fields.get("cluster", ""),
            "sig": fields.get("sig", ""),
            "slurm_user": job.get("user_name") or "",  # slurmctld's word (munge), not the tag's
            "comment": job.get("comment") or "",
            "slurm_state": slurm_state,
            "reason": job.get("state_reason") or "",
            "partition": job.get("partition") or "",
            "restarts": job.get("restart_cnt") or 0,
            "submit_time": job.get("submit_time"),
            "start_time": job.get("start_time"),
            "end_time": job.get("end_time") if finished else None,
        },
    )


def parse_squeue_json(text: str, tag: str = "allot", cluster: str | None = None) -> list[RemoteJob]:
    """Every Allot-tagged job in ``squeue --json`` (all states), optionally of one cluster."""
    jobs = []
    for raw in _load_json(text, "squeue --json").get("jobs", []):
        job = job_from_json(raw, tag)
        if job and (cluster is None or job.extra["cluster"] in {cluster, ""}):
            jobs.append(job)
    return jobs


def _number(value) -> int | None:
    """An integer field as v0.0.38 prints it (``3``) or as later versions do
    (``{"set": true, "infinite": false, "number": 3}``)."""
    if isinstance(value, dict):
        return int(value["number"]) if value.get("set") and not value.get("infinite") else None
    return int(value) if isinstance(value, int | float) else None


def _started(value, state: RemoteState) -> float | None:
    start = _number(value)
    return float(start) if start and state is not RemoteState.PENDING else None


def _first(value) -> str:
    """A state that is a string in v0.0.38 and a list of flags later (``["COMPLETED"]``)."""
    if isinstance(value, list):
        return str(value[0]) if value else ""
    return str(value or "")


def sacct_exit_code(slurm_state: str, raw: dict | None) -> int | None:
    """The exit code in a ``sacct --json`` job, or None where the JSON cannot tell.

    Slurm 22.05's dbv0.0.38 printer writes ``{"status": "SUCCESS", "return_code": 0}`` for
    *every* job that exited, whatever its code (``exit 3`` included: captured in sacct.json);
    only a signal survives. So "SUCCESS" is trusted for a COMPLETED job (which by definition
    exited 0) and means "unknown" otherwise; later versions print the real ``return_code``."""
    raw = raw or {}
    status = _first(raw.get("status"))
    signal = (raw.get("signal") or {}).get("signal_id")
    if status == "SIGNALED" and _number(signal):
        return 128 + _number(signal)
    if status == "SUCCESS":  # v0.0.38
        return 0 if slurm_state == "COMPLETED" else None
    return _number(raw.get("return_code"))


def sacct_job_from_json(job: dict, tag: str = "allot") -> RemoteJob | None:
    """One ``sacct --json`` job → RemoteJob, or None when it carries no Allot tag. The tag is
    only there when slurm.conf has ``AccountingStoreFlags=job_comment`` (and, in 22.05, only
    once the job has ended)."""
    comment = job.get("comment")
    if isinstance(comment, dict):
        comment = comment.get("job")
    fields = parse_comment(comment, tag)
    if fields is None:
        return None
    raw_state = job.get("state")
    slurm_state = _first(raw_state.get("current") if isinstance(raw_state, dict) else raw_state)
    state = allot_state(slurm_state, fields)
    times = job.get("time") or {}
    end = _number(times.get("end"))
    finished = state not in _ACTIVE
    return RemoteJob(
        job_id=int(fields["job"]),
        external_id=str(job["job_id"]),
        attempt_key=fields["attempt"],
        state=state,
        nodes=() if state is RemoteState.PENDING else expand_hostlist(job.get("nodes")),
        exit_code=sacct_exit_code(slurm_state, job.get("exit_code")) if finished else None,
        ended_at=float(end) if finished and end else None,
        started_at=_started(times.get("start"), state),
        extra={
            "cluster": fields.get("cluster", ""),
            "sig": fields.get("sig", ""),
            "slurm_user": job.get("user") or "",
            "comment": comment or "",
            "slurm_state": slurm_state,
            "reason": (raw_state or {}).get("reason") if isinstance(raw_state, dict) else "",
            "partition": job.get("partition") or "",
            "submit_time": _number(times.get("submission")),
            "start_time": _number(times.get("start")),
            "end_time": end if finished else None,
            "source": "sacct",
        },
    )


def parse_sacct_json(text: str, tag: str = "allot", cluster: str | None = None) -> list[RemoteJob]:
    """Every Allot-tagged job in ``sacct --json``, optionally of one Allot cluster.

    sacct keeps one record per run of a Slurm job id: a requeued job appears again, and a
    controller started cold hands out old ids a second time. Per id and attempt key the latest
    submission wins; the list is ordered by Slurm id, then submission."""
    latest: dict[tuple[str, str], RemoteJob] = {}
    for raw in _load_json(text, "sacct --json").get("jobs", []):
        job = sacct_job_from_json(raw, tag)
        if job is None or (cluster is not None and job.extra["cluster"] not in {cluster, ""}):
            continue
        key = (job.external_id, job.attempt_key)
        if key not in latest or (job.extra["submit_time"] or 0) >= (
            latest[key].extra["submit_time"] or 0
        ):
            latest[key] = job
    return sorted(latest.values(), key=lambda j: (int(j.external_id), j.extra["submit_time"] or 0))


def parse_sacct_exit_codes(text: str) -> dict[str, int]:
    """``sacct -X -n -P -o JobIDRaw,ExitCode`` → {Slurm id: exit code}. ``3:0`` is exit 3;
    ``0:15`` is signal 15 (shell-style 143). The text form has the code 22.05's JSON loses."""
    codes = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 2 or not parts[0].isdigit():
            continue
        code, _, signal = parts[-1].partition(":")
        if code.isdigit():
            codes[parts[0]] = 128 + int(signal) if signal.isdigit() and int(signal) else int(code)
    return codes


def kept_attempts(jobs: list[RemoteJob]) -> list[RemoteJob]:
    """One Slurm job per attempt key: the lowest Slurm id, the one ``submit`` keeps when a
    concurrent retry launched too (it cancels the others). Read as the attempt, a cancelled
    duplicate would make reconcile requeue a job that runs."""
    kept: dict[str, RemoteJob] = {}
    for job in sorted(jobs, key=lambda j: int(j.external_id)):
        kept.setdefault(job.attempt_key, job)
    return [job for job in jobs if kept[job.attempt_key] is job]


def merge_accounting(squeue: list[RemoteJob], sacct: list[RemoteJob]) -> list[RemoteJob]:
    """squeue's jobs, plus the *finished* attempts only sacct still knows (they left squeue
    after MinJobAge). squeue wins for any attempt key it shows: it is the controller's live
    view, while slurmdbd may lag. A job sacct calls running but squeue has lost is left out:
    sacct cannot say how it ended. Of several sacct records for one attempt key (a concurrent
    retry that ``submit`` cancelled), the lowest Slurm id wins, as in ``submit``."""
    known = {job.attempt_key for job in squeue}
    merged = list(squeue)
    for job in sorted(sacct, key=lambda j: int(j.external_id)):
        if job.attempt_key in known or job.state in _ACTIVE or job.state is RemoteState.UNKNOWN:
            continue
        known.add(job.attempt_key)
        merged.append(job)
    return merged
