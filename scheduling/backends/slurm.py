"""Slurm backend: ``sbatch`` / ``squeue --json`` / ``scancel`` / ``scontrol`` through one wrapper.

Allot decides where a job runs; Slurm runs it there. Every job carries a tag in ``--comment``
(``allot:cluster=C:job=ID:attempt=KEY:...``) so that:

* ``submit`` finds a job already launched for the same attempt key (a retry after a timeout, a
  worker that died between ``sbatch`` and the commit) and returns it instead of launching twice;
* ``sync`` recovers Allot's ids from Slurm alone, after a restart of either side;
* a preemption is recorded on the job itself (``:preempted=1``), so ``sync`` can tell a job Allot
  stopped from one a user cancelled without keeping any state here.

``preempt_mode``: ``cancel`` (default; Allot owns the requeue and starts a new Slurm job later) or
``requeue`` (``scontrol requeuehold``: the same Slurm job goes back to the queue *held*, and the
next ``submit`` for that Allot job moves it to the newly chosen nodes and releases it — a plain
``scontrol requeue`` would let Slurm restart it on its own, behind the engine's back).

The parsers are pure functions tested round-trip on captured real output
(tests/backends/fixtures/slurm/).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from urllib.parse import quote, unquote

from .base import (
    Backend,
    BackendError,
    BackendUnavailable,
    LaunchSpec,
    NodeInfo,
    RemoteJob,
    RemoteState,
)
from .command import CommandRunner

# Slurm clients retry for a few seconds and then say one of these; none of them is a refusal.
UNAVAILABLE_PATTERNS = (
    r"Unable to contact slurm controller",
    r"Socket timed out",
    r"Zero Bytes were transmitted",
    r"Connection refused",
    r"Transport endpoint is not connected",
    r"temporarily unable to accept job",
    r"Communication connection failure",
    r"Munge .*(?:failed|error)",
)

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
        extra={
            "cluster": fields.get("cluster", ""),
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
        extra={
            "cluster": fields.get("cluster", ""),
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


def _node_info(name, gres, flags, state, reason, default_type) -> NodeInfo:
    gpus, gpu_type = parse_gres_gpus(gres)
    flags = {f.upper() for f in flags}
    down = state.upper().split("+")[0] in {"DOWN", "FAIL", "FUTURE", "UNKNOWN"}
    drained = bool(flags & {"DRAIN", "FAIL"}) or down
    if down and not reason:
        reason = f"Slurm: node is {state.lower()}"
    return NodeInfo(name, gpus, gpu_type or default_type, drained, reason or "")


def parse_sinfo_json(
    text: str, partition: str | None = None, default_gpu_type: str = "gpu"
) -> list[NodeInfo]:
    """``sinfo --json`` nodes (optionally of one partition). A DOWN node is reported drained:
    nothing may be placed on it, which is what the engine needs to know."""
    nodes = {}
    for node in _load_json(text, "sinfo --json").get("nodes", []):
        if partition and partition not in (node.get("partitions") or []):
            continue
        nodes[node["name"]] = _node_info(
            node["name"],
            node.get("gres"),
            node.get("state_flags") or [],
            str(node.get("state") or ""),
            node.get("reason") or "",
            default_gpu_type,
        )
    return [nodes[name] for name in sorted(nodes)]


def parse_scontrol_nodes(
    text: str, partition: str | None = None, default_gpu_type: str = "gpu"
) -> list[NodeInfo]:
    """``scontrol show node -o`` (one node a line), for Slurm builds without ``--json``."""
    out = []
    for line in text.splitlines():
        attrs = dict(re.findall(r"(\w+)=(.*?)(?=\s+\w+=|\s*$)", line.strip()))
        if "NodeName" not in attrs:
            continue
        if partition and partition not in attrs.get("Partitions", "").split(","):
            continue
        state, *flags = attrs.get("State", "").split("+")
        reason = re.sub(r"\s*\[[^\]]*\]$", "", attrs.get("Reason", ""))
        out.append(
            _node_info(attrs["NodeName"], attrs.get("Gres"), flags, state, reason, default_gpu_type)
        )
    return sorted(out, key=lambda n: n.name)


def parse_sbatch_parsable(text: str) -> str:
    """``sbatch --parsable`` prints ``ID`` or ``ID;CLUSTER``."""
    first = text.strip().splitlines()[-1] if text.strip() else ""
    job_id = first.split(";")[0]
    if not job_id.isdigit():
        raise BackendError(f"slurm: sbatch printed no job id: {text[:200]!r}")
    return job_id


def sbatch_args(spec: LaunchSpec, comment: str, options: dict[str, str]) -> list[str]:
    """The ``sbatch`` command line that pins the engine's placement."""
    if not spec.nodes:
        raise BackendError(f"slurm: job {spec.job_id} has no placement")
    raw_name = f"{options.get('tag', 'allot')}-{spec.job_id}-{spec.name}"
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", raw_name)
    args = [
        "sbatch",
        "--parsable",
        f"--job-name={name[:100]}",
        f"--comment={comment}",
        f"--nodes={len(spec.nodes)}",
        f"--nodelist={','.join(spec.nodes)}",
        f"--gres=gpu:{spec.gpus_per_node}",
        f"--ntasks-per-node={options.get('tasks_per_node', '1')}",
        f"--output={options.get('output', '/dev/null')}",
        f"--chdir={options.get('workdir', '/tmp')}",
        # cancel mode: Allot restarts preempted work itself, so Slurm must not requeue it too.
        "--requeue" if options.get("preempt_mode") == "requeue" else "--no-requeue",
    ]
    for opt in ("partition", "account", "qos"):
        if options.get(opt):
            args.append(f"--{opt}={options[opt]}")
    if spec.time_limit_s:
        args.append(f"--time={slurm_duration(spec.time_limit_s)}")
    args.append(f"--wrap={spec.command or 'true'}")
    return args


# --- the backend --------------------------------------------------------------------------


class SlurmBackend(Backend):
    """Options: ``partition``, ``account``, ``qos``, ``preempt_mode`` (cancel|requeue),
    ``command_timeout`` (seconds, 30), ``command_prefix`` (e.g. ``ssh slurm-login``),
    ``slurm_conf`` (SLURM_CONF for the commands), ``gpu_type`` (when Gres has no type),
    ``tag`` (comment prefix, "allot"), ``output``, ``workdir``, ``tasks_per_node``,
    ``accounting`` (auto|sacct|none: also read ``sacct`` in ``sync``; ``auto`` finds out with
    the first call), ``sacct_window_h`` (hours of accounting ``sync`` reads back, 48)."""

    name = "slurm"
    ACCOUNTING_MODES = ("auto", "sacct", "none")

    def __init__(self, cluster_name: str, options: dict[str, str] | None = None):
        super().__init__(cluster_name, options)
        mode = self.options.setdefault("preempt_mode", "cancel")
        if mode not in {"cancel", "requeue"}:
            raise BackendError(f"slurm: preempt_mode must be cancel or requeue, not {mode!r}")
        self.tag = self.options.get("tag", "allot")
        accounting = self.options.setdefault("accounting", "auto")
        if accounting not in self.ACCOUNTING_MODES:
            raise BackendError(f"slurm: accounting must be auto, sacct or none, not {accounting!r}")
        # None: not known yet (auto, before the first sacct); then True or False for good.
        self.accounting: bool | None = {"sacct": True, "none": False}.get(accounting)
        self.accounting_note = ""  # why auto turned accounting off, for logs and the admin
        try:
            self.sacct_window_h = max(1, int(self.options.get("sacct_window_h", 48)))
        except ValueError as exc:
            raise BackendError("slurm: sacct_window_h must be a whole number of hours") from exc
        env = {"SLURM_CONF": self.options["slurm_conf"]} if self.options.get("slurm_conf") else {}
        self.runner = CommandRunner(
            timeout_s=float(self.options.get("command_timeout", 30)),
            prefix=self.options.get("command_prefix", ""),
            env=env,
            unavailable_patterns=UNAVAILABLE_PATTERNS,
            label=f"slurm[{cluster_name}]",
        )

    # reading
    def discover_nodes(self) -> list[NodeInfo]:
        partition = self.options.get("partition")
        default_type = self.options.get("gpu_type", "gpu")
        result = self.runner.run(["sinfo", "--json"], check=False)
        if result.returncode == 0 and result.stdout.lstrip().startswith("{"):
            return parse_sinfo_json(result.stdout, partition, default_type)
        # Slurm before 21.08 has no --json: the one-line scontrol format says the same.
        text = self.runner.run(["scontrol", "show", "node", "-o"]).stdout
        return parse_scontrol_nodes(text, partition, default_type)

    def sync(self) -> list[RemoteJob]:
        """squeue's jobs and, with accounting, the finished attempts only sacct still knows.

        A finished job leaves squeue after MinJobAge (300 s by default); after a longer outage
        reconcile would take it for lost and run it again. sacct remembers how it ended. Once
        accounting is known to be on, an sacct that does not answer makes the whole sync
        unavailable: a partial answer would requeue jobs that completed."""
        jobs = self._jobs()
        finished = self._accounted_jobs()
        if finished is None:
            return jobs
        merged = merge_accounting(jobs, finished)
        return self._with_exit_codes(merged, len(jobs))

    def _accounted_jobs(self) -> list[RemoteJob] | None:
        """Allot's jobs in ``sacct --json`` over the window, or None without accounting. In
        ``auto`` mode a refusal ("Slurm accounting storage is disabled", no ``--json``, no
        ``sacct`` at all) turns accounting off for this backend: sacct is not asked again."""
        if self.accounting is False:
            return None
        args = ["sacct", "--json", *self._sacct_window()]
        try:
            text = self.runner.run(args).stdout
            jobs = parse_sacct_json(text, self.tag, self.cluster_name)
        except BackendUnavailable as exc:
            if self.accounting is None and "command not found" in str(exc):
                return self._accounting_off(exc)
            raise
        except BackendError as exc:
            if self.accounting is None:
                return self._accounting_off(exc)
            raise
        self.accounting = True
        return jobs

    def _accounting_off(self, why: Exception) -> None:
        self.accounting = False
        self.accounting_note = str(why)
        return None

    def _sacct_window(self) -> list[str]:
        return [f"--starttime=now-{self.sacct_window_h}hours", "--endtime=now"]

    def _with_exit_codes(self, jobs: list[RemoteJob], first_sacct: int) -> list[RemoteJob]:
        """Slurm 22.05's JSON loses a failed job's exit code (see ``sacct_exit_code``); ask the
        text form for those few jobs, the ones only sacct knows. Best effort: the state is
        already right without it."""
        head, tail = jobs[:first_sacct], jobs[first_sacct:]
        failed = RemoteState.FAILED
        need = [j.external_id for j in tail if j.exit_code is None and j.state is failed]
        if not need:
            return jobs
        args = ["sacct", "-X", "-n", "-P", "-o", "JobIDRaw,ExitCode", *self._sacct_window()]
        args.append("--jobs=" + ",".join(need))
        try:
            codes = parse_sacct_exit_codes(self.runner.run(args, check=False).stdout)
        except BackendUnavailable:
            return jobs
        return head + [
            replace(j, exit_code=codes[j.external_id])
            if j.external_id in need and j.external_id in codes
            else j
            for j in tail
        ]

    def _jobs(self) -> list[RemoteJob]:
        text = self.runner.run(["squeue", "--json"]).stdout
        return parse_squeue_json(text, self.tag, self.cluster_name)

    # writing
    def submit(self, spec: LaunchSpec) -> RemoteJob:
        """1. Return the job already tagged with this attempt key, if any (all states: an
        attempt that already ran is not run again). 2. In requeue mode, move a held,
        preempted job of the same Allot job to the new nodes and release it. 3. Otherwise
        ``sbatch``. 4. Look again: if a concurrent retry also launched, keep the lowest Slurm id
        and cancel the rest, so every caller converges on the same job."""
        jobs = self._jobs()
        same = self._with_key(jobs, spec.attempt_key)
        if same:
            return same[0]
        if self.options["preempt_mode"] == "requeue":
            held = self._held_for(jobs, spec)
            if held:
                return self._release(held, spec)
        comment = format_comment(self.tag, self.cluster_name, spec)
        result = self.runner.run(sbatch_args(spec, comment, self.options))
        external_id = parse_sbatch_parsable(result.stdout)
        try:
            same = self._with_key(self._jobs(), spec.attempt_key)
        except BackendUnavailable:
            # The launch happened; the duplicate check is a second line of defence.
            same = []
        for extra in same[1:]:
            self.runner.run(["scancel", extra.external_id], check=False)
        if same:
            return same[0]
        return RemoteJob(spec.job_id, external_id, spec.attempt_key, RemoteState.PENDING)

    def preempt(self, job_id: int, external_id: str) -> None:
        for job in self._targets(job_id, external_id):
            comment = job.extra["comment"]
            if ":preempted=1" not in comment:
                comment += ":preempted=1"
            update = ["scontrol", "update", f"jobid={job.external_id}", f"comment={comment}"]
            self.runner.run(update)
            if self.options["preempt_mode"] == "requeue":
                self.runner.run(["scontrol", "requeuehold", job.external_id])
            else:
                self.runner.run(["scancel", job.external_id], check=False)

    def cancel(self, job_id: int, external_id: str) -> None:
        """``scancel`` exits 0 for ids it does not know; an empty external id (a submit that
        never came back) cancels whatever Slurm runs for that Allot job."""
        ids = [external_id] if external_id else [j.external_id for j in self._targets(job_id, "")]
        if ids:
            self.runner.run(["scancel", *ids], check=False)

    def drain_node(self, node: str, reason: str) -> None:
        self.runner.run(
            ["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason or 'allot'}"]
        )

    def undrain_node(self, node: str) -> None:
        self.runner.run(["scontrol", "update", f"nodename={node}", "state=resume"])

    # internals
    @staticmethod
    def _with_key(jobs: list[RemoteJob], key: str) -> list[RemoteJob]:
        return sorted((j for j in jobs if j.attempt_key == key), key=lambda j: int(j.external_id))

    def _targets(self, job_id: int, external_id: str) -> list[RemoteJob]:
        """Live Slurm jobs to stop for an Allot job: the named one, else every tagged one."""
        return [
            j
            for j in self._jobs()
            if j.state in _ACTIVE
            and (j.external_id == external_id if external_id else j.job_id == job_id)
        ]

    def _held_for(self, jobs: list[RemoteJob], spec: LaunchSpec) -> RemoteJob | None:
        for job in jobs:
            if job.job_id == spec.job_id and job.state is RemoteState.PREEMPTED:
                if job.extra["slurm_state"] == "PENDING":
                    return job
        return None

    def _release(self, held: RemoteJob, spec: LaunchSpec) -> RemoteJob:
        comment = format_comment(self.tag, self.cluster_name, spec)
        self.runner.run(
            [
                "scontrol",
                "update",
                f"jobid={held.external_id}",
                f"comment={comment}",
                f"nodelist={','.join(spec.nodes)}",
                f"numnodes={len(spec.nodes)}",
            ]
        )
        self.runner.run(["scontrol", "release", held.external_id])
        return RemoteJob(spec.job_id, held.external_id, spec.attempt_key, RemoteState.PENDING)
