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

import hashlib
import hmac
import logging
import os
import pwd
from dataclasses import replace

from .base import (
    Backend,
    BackendError,
    BackendUnavailable,
    LaunchSpec,
    NodeInfo,
    RemoteJob,
    RemoteState,
)
from .command import CommandRunner, error_message
from .slurm_nodes import parse_scontrol_nodes, parse_sinfo_json
from .slurm_parse import (  # noqa: F401 - the parsers are part of this module's API
    _ACTIVE,
    allot_state,
    exit_code_from_status,
    expand_hostlist,
    format_comment,
    job_from_json,
    kept_attempts,
    merge_accounting,
    parse_comment,
    parse_gres_gpus,
    parse_sacct_exit_codes,
    parse_sacct_json,
    parse_squeue_json,
    sacct_exit_code,
    sacct_job_from_json,
    slurm_duration,
)
from .slurm_partition import partition_warnings
from .slurm_sbatch import batch_script, parse_sbatch_parsable, sbatch_args
from .ssh import ssh_prefix

log = logging.getLogger(__name__)

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


class SlurmBackend(Backend):
    """Options: ``partition``, ``account``, ``qos``, ``preempt_mode`` (cancel|requeue),
    ``command_timeout`` (seconds, 30), ``ssh_host``/``ssh_user``/``ssh_port``/``ssh_key``/
    ``ssh_known_hosts`` (run the commands on a submit host over ssh; see backends/ssh.py; a
    plain legacy ``command_prefix=ssh [user@]host`` is read as these),
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
        # Who Allot itself is on the submit host: jobs of this user are acted on directly, any
        # other user's through `sudo -n -u USER` (see docs/slurm.md, "Identity").
        self.service_user = self.options.get("service_user") or _local_user()
        env = {"SLURM_CONF": self.options["slurm_conf"]} if self.options.get("slurm_conf") else {}
        self.runner = CommandRunner(
            timeout_s=float(self.options.get("command_timeout", 30)),
            prefix=ssh_prefix(self.options),  # built from ssh_* options, never free text
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

    def access_warnings(self) -> list[str]:
        """The governed partition (every partition without the ``partition`` option) where
        researchers could sbatch around Allot; a partition that cannot be read says so."""
        partition = self.options.get("partition")
        args = ["scontrol", "show", "partition", *([partition] if partition else []), "-o"]
        result = self.runner.run(args, check=False)
        if result.returncode != 0:
            return [
                f"cannot read who may submit to partition {partition or '(all)'}: "
                f"{error_message(result.stderr, result.stdout)}"
            ]
        return partition_warnings(result.stdout)

    def sync(self) -> list[RemoteJob]:
        """squeue's jobs and, with accounting, the finished attempts only sacct still knows.

        A finished job leaves squeue after MinJobAge (300 s by default); after a longer outage
        reconcile would take it for lost and run it again. sacct remembers how it ended. Once
        accounting is known to be on, an sacct that does not answer makes the whole sync
        unavailable: a partial answer would requeue jobs that completed."""
        jobs = kept_attempts(self._jobs())
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
            jobs = self._trusted(parse_sacct_json(text, self.tag, self.cluster_name))
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
        return self._trusted(parse_squeue_json(text, self.tag, self.cluster_name))

    # trust: only what Allot made
    def _signature(self, job_id: int, attempt_key: str, slurm_user: str) -> str:
        """HMAC of what a tag claims *and* the Unix user Allot submitted as, so a tag copied
        into another user's job (squeue shows everyone's comments) does not verify."""
        message = "\0".join([self.cluster_name, str(job_id), attempt_key, slurm_user])
        return hmac.new(self.secret or b"", message.encode(), hashlib.sha256).hexdigest()[:32]

    def _trusted(self, jobs: list[RemoteJob]) -> list[RemoteJob]:
        """The tagged jobs Allot can prove it created: the tag's signature matches the job's
        Slurm user as slurmctld reports it. Anything else that looks like Allot's (a forged
        ``allot:`` comment) is ignored and logged. A backend built without a secret (parsing
        tests) checks nothing."""
        if self.secret is None:
            return jobs
        kept = []
        for job in jobs:
            expected = self._signature(job.job_id, job.attempt_key, job.extra.get("slurm_user", ""))
            given = str(job.extra.get("sig", "")).encode()  # bytes: a forged sig may be any text
            if hmac.compare_digest(given, expected.encode()):
                kept.append(job)
            else:
                log.warning(
                    "slurm[%s]: ignoring Slurm job %s of user %r: its %s tag (job %s, attempt "
                    "%s) is not signed by Allot for that user",
                    self.cluster_name,
                    job.external_id,
                    job.extra.get("slurm_user", ""),
                    self.tag,
                    job.job_id,
                    job.attempt_key,
                )
        return kept

    def _comment(self, spec: LaunchSpec) -> str:
        user = spec.posix_user or self.service_user
        if self.secret is None:
            return format_comment(self.tag, self.cluster_name, spec)
        sig = self._signature(spec.job_id, spec.attempt_key, user)
        return format_comment(self.tag, self.cluster_name, spec, sig=sig)

    def _as(self, user: str, args: list[str]) -> list[str]:
        """``args`` run as ``user``: directly when that is Allot itself, else through sudo
        (non-interactive; sudo resets the environment). The sudoers rule allows only the job
        commands, only as members of the jobs' group."""
        if not user or user == self.service_user:
            return args
        return ["sudo", "-n", "-u", user, "--", *args]

    def _scancel(self, jobs: list[RemoteJob]) -> None:
        by_user: dict[str, list[str]] = {}
        for job in jobs:
            by_user.setdefault(job.extra.get("slurm_user", ""), []).append(job.external_id)
        for user, ids in by_user.items():
            self.runner.run(self._as(user, ["scancel", *ids]), check=False)

    # writing
    def submit(self, spec: LaunchSpec) -> RemoteJob:
        """1. Return the job already tagged with this attempt key, if any (all states: an
        attempt that already ran is not run again). 2. In requeue mode, move a held,
        preempted job of the same Allot job to the new nodes and release it. 3. Otherwise
        ``sbatch``. 4. Look again: if a concurrent retry also launched, keep the lowest Slurm id
        and cancel the rest, so every caller converges on the same job."""
        if spec.posix_user and spec.posix_user == self.service_user:
            # _as would run it without sudo: as Allot itself (scheduling.job_accounts).
            raise BackendError(
                f"slurm: job {spec.job_id}: {spec.posix_user} is this cluster's service account; "
                "jobs never run as it"
            )
        jobs = self._jobs()
        same = self._with_key(jobs, spec.attempt_key)
        if not same:  # finished longer than MinJobAge ago: only accounting remembers it
            same = self._with_key(self._accounted_jobs() or [], spec.attempt_key)
        if same:
            return same[0]
        if self.options["preempt_mode"] == "requeue":
            held = self._held_for(jobs, spec)
            if held:
                return self._release(held, spec)
        comment = self._comment(spec)
        args = sbatch_args(spec, comment, self.options)
        # on stdin: see batch_script for why not --wrap
        script = batch_script(spec, self.options.get("workdir", ""))
        result = self.runner.run(self._as(spec.posix_user, args), input=script)
        external_id = parse_sbatch_parsable(result.stdout)
        try:
            same = self._with_key(self._jobs(), spec.attempt_key)
        except BackendUnavailable:
            # The launch happened; the duplicate check is a second line of defence.
            same = []
        if same[1:]:
            self._scancel(same[1:])
        if same:
            return same[0]
        return RemoteJob(spec.job_id, external_id, spec.attempt_key, RemoteState.PENDING)

    def preempt(self, job_id: int, external_id: str) -> None:
        for job in self._targets(job_id, external_id):
            comment = job.extra["comment"]
            if ":preempted=1" not in comment:
                comment += ":preempted=1"
            owner = job.extra.get("slurm_user", "")
            update = ["scontrol", "update", f"jobid={job.external_id}", f"comment={comment}"]
            self.runner.run(self._as(owner, update))
            if self.options["preempt_mode"] == "requeue":
                self.runner.run(self._as(owner, ["scontrol", "requeuehold", job.external_id]))
            else:
                self._scancel([job])

    def cancel(self, job_id: int, external_id: str) -> None:
        """Cancel the live Slurm job(s) of this Allot job, as their owner; an empty external id
        (a submit that never came back) cancels whatever Slurm runs for that Allot job. Only
        jobs Allot can prove it created are touched; one already gone is not an error."""
        targets = self._targets(job_id, external_id)
        if targets:
            self._scancel(targets)

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
        user = spec.posix_user or self.service_user
        for job in jobs:
            if job.job_id == spec.job_id and job.state is RemoteState.PREEMPTED:
                mine = job.extra.get("slurm_user") in {user, ""}  # "" in parsing tests
                if job.extra["slurm_state"] == "PENDING" and mine:
                    return job
        return None

    def _release(self, held: RemoteJob, spec: LaunchSpec) -> RemoteJob:
        comment = self._comment(spec)
        owner = held.extra.get("slurm_user", "")
        update = [
            "scontrol",
            "update",
            f"jobid={held.external_id}",
            f"comment={comment}",
            f"nodelist={','.join(spec.nodes)}",
            f"numnodes={len(spec.nodes)}",
        ]
        self.runner.run(self._as(owner, update))
        self.runner.run(self._as(owner, ["scontrol", "release", held.external_id]))
        return RemoteJob(spec.job_id, held.external_id, spec.attempt_key, RemoteState.PENDING)


def _local_user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # pragma: no cover - a uid without a passwd entry
        return ""
