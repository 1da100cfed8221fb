"""Scenario (YAML) and trace (CSV) readers with errors that name file, line and field.

The formats are the contract in ARCHITECTURE.md. Extensions, all optional:
``usage: {mode: window|decay, half_life_days: 7}`` picks the usage shape (hard window by
default), and ``interactive: {pool_gpus: {cluster: n}, per_user: 1, max_runtime_s: 7200}``
sets up the interactive lane, and ``preemption: {checkpoint_interval_s: 1800,
restart_overhead_s: 300}`` gives preemption its cost (``costs.py``; free without it). A budget
node may carry ``share`` to override its grant as its weight among siblings. As in the portal,
a node's children together may hold no more than it does: the child that overflows its
parent is refused, naming its line.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field

import yaml

from scheduling.engine.sim.costs import PreemptionCost


class InputError(ValueError):
    """A scenario or trace file is wrong; the message says where and what."""

    def __init__(self, path: str, line: int | None, field_name: str, message: str):
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: field '{field_name}': {message}")
        self.path, self.line, self.field = path, line, field_name


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    gpu_type: str
    nodes: int
    gpus_per_node: int


@dataclass(frozen=True)
class BudgetSpec:
    path: str
    gpu_hours: float
    share: float


@dataclass(frozen=True)
class Scenario:
    window_days: float
    gpu_types: dict[str, float]
    clusters: tuple[ClusterSpec, ...]
    budgets: tuple[BudgetSpec, ...]
    maintenance: tuple[tuple[str, float], ...] = ()
    usage_mode: str = "window"
    half_life_days: float = 7.0
    interactive_pool_gpus: dict[str, int] = field(default_factory=dict)
    interactive_per_user: int = 1
    interactive_max_runtime_s: float = 7200.0
    preemption: PreemptionCost = PreemptionCost()

    @property
    def window_s(self) -> float:
        return self.window_days * 86400.0

    def node_names(self) -> list[tuple[str, ClusterSpec]]:
        return [(f"{c.name}-{i:02d}", c) for c in self.clusters for i in range(c.nodes)]


class _LineLoader(yaml.SafeLoader):
    """Records the line of every mapping so errors can point at it."""


def _construct_mapping(loader, node):
    mapping = _Lined(loader.construct_mapping(node, deep=True))
    mapping.line = node.start_mark.line + 1
    mapping.lines = {k.value: k.start_mark.line + 1 for k, _ in node.value}
    return mapping


class _Lined(dict):
    line = 0
    lines: dict = {}


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _num(path, m, key, kind=float, default=None, positive=True):
    line = getattr(m, "lines", {}).get(key, getattr(m, "line", None))
    if key not in m:
        if default is not None:
            return default
        raise InputError(path, getattr(m, "line", None), key, "is required")
    try:
        value = kind(m[key])
    except (TypeError, ValueError):
        raise InputError(path, line, key, f"must be a number, not {m[key]!r}") from None
    if positive and value < 0:
        raise InputError(path, line, key, "must not be negative")
    return value


def _map(path, value, where, line):
    if not isinstance(value, dict):
        raise InputError(path, line, where, "must be a mapping")
    return value


def load_scenario(path: str) -> Scenario:
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.load(fh, Loader=_LineLoader)  # noqa: S506 - SafeLoader subclass
    except OSError as exc:
        raise InputError(path, None, "file", exc.strerror or str(exc)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputError(path, mark.line + 1 if mark else None, "yaml", str(exc)) from None
    data = _map(path, data, "scenario", 1)
    window = _num(path, data, "window_days", float, 7.0)
    gpu_types_raw = _map(path, data.get("gpu_types", {}), "gpu_types", data.lines.get("gpu_types"))
    gpu_types = {str(k): _num(path, gpu_types_raw, k) for k in gpu_types_raw}
    clusters = []
    raw_clusters = data.get("clusters")
    if not isinstance(raw_clusters, list) or not raw_clusters:
        raise InputError(path, data.lines.get("clusters", 1), "clusters", "needs at least one")
    for c in raw_clusters:
        c = _map(path, c, "clusters", data.lines.get("clusters"))
        for key in ("name", "gpu_type"):
            if not c.get(key):
                raise InputError(path, c.line, key, "is required")
        gpu_type = str(c["gpu_type"])
        if gpu_types and gpu_type not in gpu_types:
            raise InputError(
                path, c.lines["gpu_type"], "gpu_type", f"{gpu_type!r} not in gpu_types"
            )
        gpu_types.setdefault(gpu_type, 1.0)
        clusters.append(
            ClusterSpec(
                str(c["name"]),
                gpu_type,
                _num(path, c, "nodes", int),
                _num(path, c, "gpus_per_node", int, 8),
            )
        )
    budgets: list[BudgetSpec] = []

    def walk(items, prefix, line, parent_hours=None):
        if not isinstance(items, list):
            raise InputError(path, line, "budgets", "must be a list")
        held = 0.0
        for b in items:
            b = _map(path, b, "budgets", line)
            if not b.get("name") or "/" in str(b["name"]):
                raise InputError(path, b.line, "name", "is required and may not contain '/'")
            p = f"{prefix}/{b['name']}" if prefix else str(b["name"])
            hours = _num(path, b, "gpu_hours", float)
            held += hours
            if parent_hours is not None and held > parent_hours + 1e-9:
                raise InputError(
                    path,
                    b.lines.get("gpu_hours", b.line),
                    "gpu_hours",
                    f"{p} is granted {hours:g} GPU-hours, but {prefix} holds {parent_hours:g} "
                    f"and its other children already hold {held - hours:g}: a node's children "
                    "may not hold more than it does",
                )
            share = _num(path, b, "share", float, hours)
            budgets.append(BudgetSpec(p, hours, share))
            if "children" in b:
                walk(b["children"], p, b.lines.get("children"), hours)

    walk(data.get("budgets", []), "", data.lines.get("budgets"))
    names = {n for n, _ in Scenario(window, gpu_types, tuple(clusters), ()).node_names()}
    maintenance = []
    for m in data.get("maintenance") or []:
        m = _map(path, m, "maintenance", data.lines.get("maintenance"))
        if m.get("node") not in names:
            raise InputError(path, m.line, "node", f"unknown node {m.get('node')!r}")
        maintenance.append((str(m["node"]), _num(path, m, "at_s", float)))
    usage = data.get("usage") or {}
    mode = usage.get("mode", "window")
    if mode not in ("window", "decay"):
        raise InputError(path, usage.lines.get("mode"), "mode", "must be 'window' or 'decay'")
    inter = data.get("interactive") or {}
    pre = _map(path, data.get("preemption") or {}, "preemption", data.lines.get("preemption"))
    cost = PreemptionCost(
        _num(path, pre, "checkpoint_interval_s", float, 0.0),
        _num(path, pre, "restart_overhead_s", float, 0.0),
    )
    return Scenario(
        window_days=window,
        gpu_types=gpu_types,
        clusters=tuple(clusters),
        budgets=tuple(budgets),
        maintenance=tuple(sorted(maintenance, key=lambda m: (m[1], m[0]))),
        usage_mode=mode,
        half_life_days=_num(path, usage, "half_life_days", float, window) if usage else window,
        interactive_pool_gpus={str(k): int(v) for k, v in (inter.get("pool_gpus") or {}).items()},
        interactive_per_user=int(inter.get("per_user", 1)),
        interactive_max_runtime_s=float(inter.get("max_runtime_s", 7200)),
        preemption=cost,
    )


@dataclass(frozen=True)
class TraceJob:
    id: str
    submit_s: float
    project: str
    user: str
    gpus: int
    duration_s: float
    min_runtime_s: float
    resumable: bool
    kind: str
    cluster: str | None
    priority: str = "normal"


TRACE_COLUMNS = (
    "job_id",
    "submit_s",
    "project",
    "user",
    "gpus",
    "duration_s",
    "min_runtime_s",
    "resumable",
    "kind",
    "cluster",
)
BOOLS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}


def load_trace(path: str, until_s: float | None = None, from_s: float = 0.0) -> list[TraceJob]:
    """Rows submitted after ``until_s`` are skipped (they are outside the replay). With
    ``from_s``, only rows submitted at or after it are kept and their submit times shifted so
    the slice starts at 0 (``until_s`` then counts from the start of the slice)."""
    try:
        fh = open(path, newline="", encoding="utf-8")
    except OSError as exc:
        raise InputError(path, None, "file", exc.strerror or str(exc)) from None
    jobs: list[TraceJob] = []
    seen: set[str] = set()
    with fh:
        reader = csv.DictReader(fh)
        missing = [c for c in TRACE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(path, 1, missing[0], "column is missing from the header")
        for row in reader:
            line = reader.line_num

            def num(key, kind=float, minimum=0.0, row=row, line=line):
                try:
                    value = kind(row[key])
                except (TypeError, ValueError):
                    raise InputError(
                        path, line, key, f"must be a number, not {row[key]!r}"
                    ) from None
                if value < minimum:
                    raise InputError(path, line, key, f"must be at least {minimum}")
                return value

            jid = (row["job_id"] or "").strip()
            if not jid:
                raise InputError(path, line, "job_id", "is required")
            if jid in seen:
                raise InputError(path, line, "job_id", f"{jid!r} appears twice")
            seen.add(jid)
            resumable = BOOLS.get((row["resumable"] or "true").strip().lower())
            if resumable is None:
                raise InputError(path, line, "resumable", "must be true or false")
            kind = (row["kind"] or "batch").strip()
            if kind not in ("batch", "interactive"):
                raise InputError(path, line, "kind", "must be batch or interactive")
            priority = (row.get("priority") or "normal").strip()
            if priority not in ("low", "normal", "high", "urgent"):
                raise InputError(path, line, "priority", "must be low, normal, high or urgent")
            submit = num("submit_s") - from_s
            if submit < 0 or (until_s is not None and submit > until_s):
                continue
            jobs.append(
                TraceJob(
                    jid,
                    submit,
                    (row["project"] or "").strip(),
                    (row["user"] or "").strip(),
                    num("gpus", int, 1),
                    num("duration_s", float, 0.0),
                    num("min_runtime_s"),
                    resumable,
                    kind,
                    (row["cluster"] or "").strip() or None,
                    priority,
                )
            )
    return sorted(jobs, key=lambda j: (j.submit_s, j.id))
