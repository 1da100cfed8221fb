"""Slurm's nodes as Allot sees them: ``sinfo --json``, or ``scontrol show node -o`` on builds
without ``--json``. Pure translation, tested on captured real output like ``slurm_parse``."""

from __future__ import annotations

import re

from .base import NodeInfo
from .slurm_parse import _load_json, parse_gres_gpus


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
