"""The one way backends run an outside command: a timeout, and errors sorted into two kinds.

Every ``sbatch``, ``squeue``, ``scancel`` and ``scontrol`` call goes through :class:`CommandRunner`
so that no call can hang a Celery worker and so that callers only ever see

* :class:`BackendUnavailable` — the command or its server did not answer (timeout, controller
  down, binary missing): nothing was decided, retry later with backoff;
* :class:`BackendError` — the server answered and refused (bad node name, invalid request):
  retrying the same request will not help.

A ``prefix`` (e.g. ``ssh -o BatchMode=yes slurm-login``) runs the commands on another host, which
is how Allot talks to a cluster whose submit host is not the one it runs on. A prefix is a remote
shell: it is given the whole command as *one* argument, quoted with :func:`shlex.join`, because
ssh concatenates its arguments and the login node's shell parses them again (unquoted, a job's
``train.py; curl … | sh`` would run on the login node at dispatch). Any prefix must therefore
take a shell command line as its last argument (``ssh host``, ``sh -c``, ``runuser -u U -- sh -c``).

Every command runs with an explicit minimal environment (:func:`minimal_env`) plus what the
backend sets (``SLURM_CONF``), never the worker's: Allot's database and broker URLs, secrets and
settings module must not reach a cluster, least of all a job.
"""

from __future__ import annotations

import errno
import os
import pwd
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .base import BackendError, BackendUnavailable

DEFAULT_TIMEOUT_S = 30.0
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def minimal_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a backend command: a fixed PATH and locale, and who we are
    (from the password database, not from the worker's variables), plus ``extra``."""
    env = {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    try:
        me = pwd.getpwuid(os.getuid())
        env.update(HOME=me.pw_dir, USER=me.pw_name, LOGNAME=me.pw_name)
    except KeyError:  # pragma: no cover - a uid without a passwd entry (some containers)
        pass
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class CommandResult:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    duration_s: float


def error_message(stderr: str, stdout: str = "") -> str:
    """The line a human wants from a failed command: the last one naming an error, else the last
    non-empty one. Slurm prints ``sbatch: error: Batch job submission failed: <why>``."""
    lines = [line.strip() for line in (stderr or stdout).splitlines() if line.strip()]
    for line in reversed(lines):
        if "error" in line.lower():
            return line
    return lines[-1] if lines else "no output"


class CommandRunner:
    """Runs commands with a timeout and classifies failures.

    ``unavailable_patterns`` are regular expressions over stderr/stdout that mean "the server did
    not answer" even though the command exited (Slurm clients retry for a few seconds and then
    exit 1 with "Unable to contact slurm controller").
    """

    def __init__(
        self,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        prefix: Sequence[str] | str = (),
        env: dict[str, str] | None = None,
        unavailable_patterns: Iterable[str] = (),
        label: str = "backend",
    ):
        self.timeout_s = float(timeout_s)
        self.prefix = tuple(shlex.split(prefix) if isinstance(prefix, str) else prefix)
        self.env = dict(env or {})
        self.unavailable = [re.compile(p, re.IGNORECASE) for p in unavailable_patterns]
        self.label = label

    def run(
        self,
        args: Sequence[str],
        *,
        check: bool = True,
        timeout_s: float | None = None,
        input: str | None = None,  # noqa: A002 - the name subprocess uses
    ) -> CommandResult:
        """Run ``args`` (through the prefix, quoted as one shell command line, if there is
        one). With ``check`` a non-zero exit raises; without it the caller reads the return
        code itself (e.g. ``scancel`` of an id that is gone). A timeout or an unreachable
        server raises :class:`BackendUnavailable` either way. ``input`` is written to the
        command's standard input (sbatch's script; ssh and sudo pass it on); without it the
        command reads nothing."""
        full = (*self.prefix, shlex.join(args)) if self.prefix else tuple(args)
        timeout = self.timeout_s if timeout_s is None else timeout_s
        started = time.monotonic()
        env = minimal_env(self.env)
        try:
            # A new session, so that a timeout kills the whole group (ssh and its children
            # included), not just the first process.
            proc = subprocess.Popen(
                full,
                stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            raise BackendUnavailable(f"{self.label}: command not found: {full[0]}") from exc
        except OSError as exc:
            if exc.errno == errno.E2BIG:  # this request is too big; the cluster is fine
                raise BackendError(f"{self.label}: {args[0]}: command line too long") from exc
            raise BackendUnavailable(f"{self.label}: cannot run {full[0]}: {exc}") from exc
        try:
            stdout, stderr = proc.communicate(input=input, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise BackendUnavailable(
                f"{self.label}: {shlex.join(args[:2])} did not answer within {timeout:g} s"
            ) from None
        result = CommandResult(
            tuple(full), proc.returncode, stdout, stderr, time.monotonic() - started
        )
        if self.is_unavailable(result.stderr + "\n" + result.stdout) and result.returncode != 0:
            raise BackendUnavailable(f"{self.label}: {error_message(stderr, stdout)}")
        if check and result.returncode != 0:
            raise BackendError(f"{self.label}: {args[0]} failed: {error_message(stderr, stdout)}")
        return result

    def is_unavailable(self, text: str) -> bool:
        return any(p.search(text) for p in self.unavailable)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    try:
        proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process that ignores SIGKILL
        pass
