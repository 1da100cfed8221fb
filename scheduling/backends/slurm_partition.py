"""Who may submit to a Slurm partition, from ``scontrol show partition -o``: a partition Allot
governs must take work only through Allot, or researchers sbatch around their budgets.

Allot submits as each job's owner (docs/slurm.md, "Identity"), so Slurm sees the researcher's
own uid, groups, account and QOS whether the job came through Allot or from a login node.
``AllowGroups``, ``AllowAccounts`` and ``AllowQos`` keep out whoever has no business there,
but not the researchers Allot submits for: what tells the two apart is the host a submission
comes from, ``AllocNodes`` set to Allot's submit host. Pure translation, tested on captured
output like ``slurm_nodes``.
"""

from __future__ import annotations

import re

MEMBERSHIP = ("AllowAccounts", "AllowGroups", "AllowQos")
GUIDE = 'docs/slurm.md, "Closing the side door"'


def parse_scontrol_partitions(text: str) -> dict[str, dict[str, str]]:
    """Partition name -> its ``Key=Value`` settings, one partition a line."""
    found = {}
    for line in text.splitlines():
        attrs = dict(re.findall(r"(\w+)=(.*?)(?=\s+\w+=|\s*$)", line.strip()))
        if "PartitionName" in attrs:
            found[attrs["PartitionName"]] = attrs
    return found


def side_door(name: str, attrs: dict[str, str]) -> str | None:
    """Why researchers could submit to this partition without Allot, or None when only
    submissions from named hosts are accepted (``AllocNodes`` not ``ALL``)."""
    if attrs.get("AllocNodes", "ALL") != "ALL":
        return None
    settings = " ".join(f"{key}={attrs.get(key, 'ALL')}" for key in MEMBERSHIP)
    denied = any(attrs.get(key) for key in ("DenyAccounts", "DenyQos"))
    if all(attrs.get(key, "ALL") == "ALL" for key in MEMBERSHIP) and not denied:
        return (
            f"partition {name} is open to everyone ({settings} AllocNodes=ALL): anyone with "
            "a Slurm association can sbatch there around Allot, unbudgeted and unscheduled. "
            f"Accept submissions only from Allot's submit host ({GUIDE})."
        )
    return (
        f"partition {name} accepts submissions from any host (AllocNodes=ALL; {settings}): "
        "Allot submits as each job's owner, so everyone these rules let in through Allot can "
        f"also sbatch there directly. Set AllocNodes to Allot's submit host ({GUIDE})."
    )


def partition_warnings(text: str) -> list[str]:
    return [
        warning
        for name, attrs in parse_scontrol_partitions(text).items()
        if (warning := side_door(name, attrs))
    ]
