"""Small builders for engine snapshots in tests."""

from __future__ import annotations

from scheduling.engine.model import (
    BudgetNode,
    Node,
    PendingJob,
    Policy,
    RunningJob,
    Snapshot,
)

RICH = 1e12  # a balance that funds anything


def nodes(n: int, cluster: str = "c", gpus: int = 8, gpu_type: str = "H100", drained=()):
    return tuple(
        Node(f"{cluster}-{i:02d}", cluster, gpu_type, gpus, drained=i in drained) for i in range(n)
    )


def budgets(*specs):
    """budgets(("nlp", 2), ("nlp/olmo", 1, usage), ...) -> BudgetNodes funded richly."""
    out = []
    for spec in specs:
        path, share = spec[0], spec[1]
        usage = spec[2] if len(spec) > 2 else 0.0
        remaining = spec[3] if len(spec) > 3 else RICH
        out.append(BudgetNode(path, share, usage, remaining))
    return tuple(out)


def run(
    jid,
    project,
    gpus,
    node,
    *,
    protected_until=0.0,
    funded=True,
    user="u",
    start=0.0,
    kind="batch",
    placement=None,
):
    return RunningJob(
        jid,
        project,
        user,
        gpus,
        placement or ((node, gpus),),
        start,
        protected_until,
        funded,
        kind=kind,
    )


def pend(jid, project, gpus, *, submit=0.0, min_runtime=3600.0, user="u", **kw):
    return PendingJob(jid, project, user, gpus, submit, min_runtime, **kw)


def snap(nodes_, budgets_, running=(), pending=(), now=100_000.0, policy=None, **kw):
    return Snapshot(
        now,
        tuple(nodes_),
        tuple(budgets_),
        tuple(running),
        tuple(pending),
        kw.pop("gpu_cost", {"H100": 1.0}),
        policy=policy or Policy(),
        **kw,
    )


def started(decisions):
    return {s.job_id: s for s in decisions.starts}


def preempted(decisions):
    return {p.job_id: p for p in decisions.preemptions}


def assert_no_protected_job_preempted(snapshot, decisions):
    """Every victim of ``decisions`` was unfunded or past its protection in ``snapshot``."""
    by_id = {r.id: r for r in snapshot.running}
    for p in decisions.preemptions:
        victim = by_id[p.job_id]
        assert not victim.funded or snapshot.now_s >= victim.protected_until_s
