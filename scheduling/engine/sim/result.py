"""What a replay returns (``SimResult``), the per-job state it keeps, and the reporting
steps of the replay that fill the result in (a base of ``simulator.Simulator``)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from scheduling.engine.sim.accounting import Accounting
from scheduling.engine.sim.scenario import Scenario, TraceJob
from scheduling.engine.tree import FairTree


@dataclass
class JobState:
    spec: TraceJob
    left_s: float  # work still to do
    attempt: int = 0
    first_start_s: float | None = None
    end_s: float | None = None
    overhead_s: float = 0.0  # restart overhead of the current attempt


@dataclass
class SimResult:
    policy: str
    horizon_s: float
    scenario: Scenario
    tree: FairTree
    total_gpus: int
    busy_gpu_s: float
    allocated: dict[str, float]  # project -> cost-normalised funded GPU-seconds
    unallocated: dict[str, float]  # project ("" = none) -> unfunded GPU-seconds
    waits: dict[str, list[float]]
    wait_by_size: dict[str, list[float]]
    submitted: int
    completed: int
    preemptions: int
    protected_preemptions: int
    drains: list[dict]
    events: list[tuple[float, int, int, str, str, str, str]] = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)
    passes: int = 0
    wasted: dict[str, float] = field(default_factory=dict)  # project -> GPU-seconds (costed)
    fragmentation: dict[str, float] = field(default_factory=dict)  # project -> GPU-seconds
    fragmentation_total: float = 0.0
    idle_while_fits: float = 0.0  # GPU-seconds (costs.py), not cost-normalised
    preempted: dict[str, int] = field(default_factory=dict)  # job -> its preemptions


def size_class(gpus: int) -> str:
    return "1" if gpus == 1 else "2-4" if gpus <= 4 else "5-8" if gpus <= 8 else ">8"


class ResultReport(Accounting):
    def _sample(self, t: float) -> None:
        self._charge(t)
        total = sum(self.res.allocated.values()) or 1.0
        programs: dict[str, float] = defaultdict(float)
        for project, used in self.res.allocated.items():
            programs[project.split("/")[0]] += used / total
        horizon = t or 1.0
        self.res.samples.append(
            {
                "t_s": t,
                "delivered": dict(programs),
                "utilization": self.res.busy_gpu_s / (self.total_gpus * horizon) if t else 0.0,
                "busy_now": self.busy / self.total_gpus,
            }
        )

    def _finish_report(self, horizon: float) -> None:
        for r in self.running.values():  # the restart overhead already paid at the horizon
            paid = min(self.jobs[r.id].overhead_s, horizon - r.start_s)
            self.res.wasted[r.project] += paid * r.gpus * self.node_cost[r.nodes[0][0]]
        for state in self.jobs.values():  # censored waits: still waiting at the horizon
            s = state.spec
            if state.first_start_s is None and s.submit_s <= horizon:
                self.res.waits[s.project].append(horizon - s.submit_s)
                self.res.wait_by_size[size_class(s.gpus)].append(horizon - s.submit_s)
        for node, at in sorted(self.drain_req.items(), key=lambda x: (x[1], x[0])):
            self.res.drains.append(
                {"node": node, "requested_s": at, "drained_s": self.drained_at[node]}
            )
        self.res.events.sort()
