"""The environment a job declares: variables its command sees on the cluster.

A job runs with ``--export=NONE`` on Slurm and with only its manifest's variables on
Kubernetes, never with the worker's (none of its secrets); what it needs besides
the scheduler's own variables it declares here. The portal's form and the API refuse the same
things, through :func:`check_env` in the submission service.

The rules, and why:

* names are shell names (the whole name matches ``[A-Za-z_][A-Za-z0-9_]*``, 128 characters
  at most; a final newline too is refused): anything else cannot be exported from a shell
  script and is refused by Kubernetes' validation too;
* names that belong to the platform are refused: Allot's own (``ALLOT_``), the scheduler's
  (``SLURM_``, and ``SBATCH_``/``SRUN_``/``SALLOC_``, which steer the job's own ``srun`` steps),
  Kubernetes' service links (``KUBERNETES_``), the job's rank (``JOB_COMPLETION_INDEX``) and
  who the job runs as (``HOME``, ``USER``, ``LOGNAME``, ``SHELL``): a job that overrides them
  would lie to its own tools about where and as whom it runs;
* ``LD_PRELOAD`` and ``LD_AUDIT`` are refused: they hand code to every program the job starts,
  the site's wrappers included. A job that really needs them says so in its command, where its
  owner, its project's leads and the cluster's admins see it.
* ``PATH``, ``LD_LIBRARY_PATH`` and the like are allowed: jobs set them for their toolchains
  (conda, CUDA), and the job is its owner's code running as its owner — its environment can do
  nothing its command could not. The list above is not a sandbox; it keeps the platform's names
  the platform's.
* at most 64 variables, each value at most 4 KiB (UTF-8), no NUL byte (no environment can hold
  one). Newlines are allowed (the backends quote values, never paste them).
"""

from __future__ import annotations

import re

from scheduling.errors import JobValidationError

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # fullmatch: "$" would pass "NAME\n"
MAX_NAME = 128
MAX_VARS = 64
MAX_VALUE_BYTES = 4096
RESERVED_PREFIXES = ("ALLOT_", "SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "KUBERNETES_")
RESERVED_NAMES = frozenset(
    {"HOME", "USER", "LOGNAME", "SHELL", "JOB_COMPLETION_INDEX", "LD_PRELOAD", "LD_AUDIT"}
)


def _refuse(message: str) -> None:
    raise JobValidationError("env", message)


def check_name(name: str) -> None:
    if not isinstance(name, str) or not NAME.fullmatch(name) or len(name) > MAX_NAME:
        _refuse(
            f"{str(name)[:80]!r} is not a variable name (letters, digits and _, not starting "
            f"with a digit, {MAX_NAME} characters at most)"
        )
    upper = name.upper()
    for prefix in RESERVED_PREFIXES:
        if upper.startswith(prefix):
            _refuse(f"{name}: names starting with {prefix} belong to the platform")
    if upper in RESERVED_NAMES:
        _refuse(f"{name} is set by the platform, not by a job")


def check_env(env) -> dict[str, str]:
    """``env`` as a plain dict of str → str, or :class:`JobValidationError` on ``env`` naming
    the bad variable."""
    if env is None:
        return {}
    if not isinstance(env, dict):
        _refuse("an object of NAME: value")
    if len(env) > MAX_VARS:
        _refuse(f"{len(env)} variables; a job declares at most {MAX_VARS}")
    clean: dict[str, str] = {}
    for name, value in env.items():
        check_name(name)
        if not isinstance(value, str):
            _refuse(f"{name}: the value must be text")
        if "\0" in value:
            _refuse(f"{name}: the value contains a NUL byte")
        if len(value.encode("utf-8", "surrogatepass")) > MAX_VALUE_BYTES:
            _refuse(f"{name}: the value is longer than {MAX_VALUE_BYTES} bytes")
        clean[name] = value
    return clean


def parse_lines(text: str) -> dict[str, str]:
    """The form's textarea: ``NAME=value`` per line (the value is everything after the first
    ``=``, kept as typed); blank lines and lines starting with ``#`` are skipped."""
    env: dict[str, str] = {}
    for number, raw in enumerate((text or "").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = raw.lstrip().partition("=")
        if not sep:
            _refuse(f"line {number}: expected NAME=value, got {line[:80]!r}")
        name = name.strip()
        check_name(name)
        if name in env:
            _refuse(f"{name} is given twice")
        env[name] = value
    return check_env(env)


def format_lines(env: dict[str, str]) -> str:
    return "\n".join(f"{name}={value}" for name, value in (env or {}).items())
