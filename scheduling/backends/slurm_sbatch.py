"""What Allot hands ``sbatch``: the command line that pins the engine's placement, the batch
script on standard input, and the job id ``sbatch --parsable`` prints back."""

from __future__ import annotations

import re
import shlex

from .base import BackendError, LaunchSpec
from .slurm_parse import slurm_duration


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
        # Never a shared directory (a module planted in /tmp was the first thing python
        # imported): the configured per-user one, or "/" (root's, nothing can be planted, and
        # never the worker's own directory) and the script moves to the owner's home.
        f"--chdir={workdir_for(spec, options.get('workdir', '')) or '/'}",
        # The job gets none of the submitting process's variables (sudo already reset them;
        # this also holds when Allot submits without sudo or over ssh).
        "--export=NONE",
        # cancel mode: Allot restarts preempted work itself, so Slurm must not requeue it too.
        "--requeue" if options.get("preempt_mode") == "requeue" else "--no-requeue",
    ]
    for opt in ("partition", "account", "qos"):
        if options.get(opt):
            args.append(f"--{opt}={options[opt]}")
    if spec.time_limit_s:
        args.append(f"--time={slurm_duration(spec.time_limit_s)}")
    return args  # the script comes on standard input: batch_script(spec)


def workdir_for(spec: LaunchSpec, template: str) -> str:
    """The configured working directory with ``{user}`` as the owner's account; "" when none
    is configured (the owner's home, found by the script on the node)."""
    if not template:
        return ""
    try:
        path = template.format(user=spec.posix_user or spec.user)
    except (KeyError, IndexError, ValueError) as exc:
        raise BackendError(f"slurm: workdir {template!r}: only {{user}} may be filled") from exc
    if not path.startswith("/"):
        raise BackendError(f"slurm: workdir {template!r} must be an absolute path")
    return path


# The owner's home from the node's password database, not from HOME (--export=NONE: the job
# has no environment yet) and before the job's declared variables (PATH among them) apply.
TO_HOME = (
    'home=$(getent passwd "$(id -u)" | cut -d: -f6) && [ -n "$home" ] && cd -- "$home" '
    '|| { echo "allot: no home directory to start in" >&2; exit 1; }'
)

SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # always fullmatch: "$" passes "NAME\n"


def batch_script(spec: LaunchSpec, workdir: str = "") -> str:
    """The job's batch script, given to ``sbatch`` on standard input (not ``--wrap``, not
    ``--export=NONE,NAME=value``): ``--export`` splits its list at commas, so a value holding
    one cannot pass, and every argument is visible to all users of the submit host in ``ps``,
    while a script is stored by slurmctld for the job's owner and operators alone. The job's
    declared variables are exported at its top, each value quoted for ``sh`` with
    :func:`shlex.quote` (names are checked shell names, scheduling.job_env). The ``:`` line
    ends sbatch's reading of ``#SBATCH`` directives, so a command cannot add any (an
    ``--array`` would run GPU work Allot never placed). Without a configured ``workdir`` the
    script first moves to its owner's home (sbatch_args gives it "/")."""
    lines = ["#!/bin/sh", "# Written by Allot: sbatch reads no #SBATCH line past the next.", ":"]
    if not workdir:
        lines.append(TO_HOME)
    for name, value in spec.env.items():
        if not SHELL_NAME.fullmatch(name) or "\0" in value:  # checked at submission; never trusted
            raise BackendError(f"slurm: job {spec.job_id}: env: {name[:80]!r} cannot be exported")
        lines.append(f"export {name}={shlex.quote(value)}")
    lines.append(spec.command or "true")
    return "\n".join(lines) + "\n"
