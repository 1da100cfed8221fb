"""A job described in a YAML file, for ``allot submit job.yaml``::

    name: olmo-7b-sweep
    project: nlp/olmo
    cluster: jupiter
    gpus: 8
    min_runtime: 2h          # or min_runtime_s: 7200
    resumable: true
    kind: batch
    command: [python, train.py, --lr, "3e-4"]   # a list keeps words exactly; a string is sent as is
    env: {WANDB_PROJECT: olmo}
    sim_duration: 1h         # the simulated cluster only

Flags given on the command line win over the file.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

from allot_cli.durations import parse_duration
from allot_cli.errors import UsageProblem

KEYS = {
    "name",
    "project",
    "cluster",
    "gpus",
    "min_runtime",
    "min_runtime_s",
    "resumable",
    "kind",
    "command",
    "env",
    "sim_duration",
    "sim_duration_s",
}


def read_job_file(path: str) -> dict:
    """The file as the API's submission fields (``min_runtime_s``, ``command`` as one string)."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageProblem(f"cannot read {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise UsageProblem(f"{path} is not valid YAML: {_first_line(exc)}") from None
    if not isinstance(data, dict):
        raise UsageProblem(f"{path}: expected a mapping of job fields (name, gpus, ...)")
    unknown = sorted(set(map(str, data)) - KEYS)
    if unknown:
        known = ", ".join(sorted(KEYS))
        raise UsageProblem(f"{path}: unknown field {unknown[0]!r} (known: {known})")
    job = {k: v for k, v in data.items() if k in KEYS and v is not None}
    for short in ("min_runtime", "sim_duration"):
        if short in job:
            try:
                job[f"{short}_s"] = parse_duration(str(job.pop(short)))
            except ValueError as exc:
                raise UsageProblem(f"{path}: {short}: {exc}") from None
    if isinstance(job.get("command"), list):
        job["command"] = join_command([str(word) for word in job["command"]])
    return job


def join_command(words: list[str]) -> str:
    """Words as the shell would need them typed, so a backend that splits the command again
    (shlex rules) gets exactly these words back."""
    return shlex.join(words)


def _first_line(exc: Exception) -> str:
    return " ".join(str(exc).split())
