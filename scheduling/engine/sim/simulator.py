"""Event-driven replay of a trace through the engine.

The clock jumps from event to event (submit, finish, protection end, drain request, a sample
tick); a scheduling pass runs at an event time, at most once per ``pass_interval_s`` (later
events within the interval are served by a pass at its end), as a live scheduler's loop
would. Usage is charged per project at each pass from the running jobs' rates, so a pass costs
O(projects + running + pending), never O(elapsed seconds).

Budget periods are the scenario's window: each period every project's grant is available
again; a funded start holds a lien on the unspent part of its protected window.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field, replace

from scheduling.engine.model import BudgetNode, Node, PendingJob, Policy, RunningJob, Snapshot
from scheduling.engine.passes import run_pass
from scheduling.engine.sim.scenario import Scenario, TraceJob
from scheduling.engine.tree import FairTree, ancestors
from scheduling.engine.usage import DecayedUsage, HardWindowUsage

# Order of events at one instant: finishes and preemptions free GPUs before starts use them.
FINISH, PREEMPT, SUBMIT, START = "finish", "preempt", "submit", "start"
EVENT_ORDER = {FINISH: 0, PREEMPT: 1, SUBMIT: 2, START: 3}
_WAKE, _SUBMIT, _FINISH, _DRAIN, _SAMPLE = 3, 2, 0, 1, 4


@dataclass
class JobState:
    spec: TraceJob
    left_s: float  # work still to do
    attempt: int = 0
    first_start_s: float | None = None
    end_s: float | None = None


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


def size_class(gpus: int) -> str:
    return "1" if gpus == 1 else "2-4" if gpus <= 4 else "5-8" if gpus <= 8 else ">8"


class Simulator:
    def __init__(
        self,
        scenario: Scenario,
        jobs: list[TraceJob],
        policy: str = "fairshare",
        until_s: float | None = None,
        pass_interval_s: float = 60.0,
        sample_every_s: float = 6 * 3600.0,
        record_events: bool = True,
        progress=None,
    ):
        self.sc = scenario
        self.jobs = {j.id: JobState(j, j.duration_s) for j in jobs}
        self.policy = Policy(
            name=policy,
            interactive_pool_gpus=dict(scenario.interactive_pool_gpus),
            interactive_per_user=scenario.interactive_per_user,
            interactive_max_runtime_s=scenario.interactive_max_runtime_s,
        )
        self.until = until_s
        self.interval = pass_interval_s
        self.sample_every = sample_every_s
        self.record = record_events
        self.progress = progress
        self.grants = {b.path: b.gpu_hours * 3600.0 for b in scenario.budgets}
        self.shares = {b.path: b.share for b in scenario.budgets}
        self.leaves = {b.path for b in scenario.budgets} - {
            b.path.rsplit("/", 1)[0] for b in scenario.budgets if "/" in b.path
        }
        self.tree = FairTree.build([BudgetNode(p, s) for p, s in self.shares.items()])
        self.nodes = {
            name: Node(name, c.name, c.gpu_type, c.gpus_per_node)
            for name, c in scenario.node_names()
        }
        self.node_cost = {n: scenario.gpu_types.get(x.gpu_type, 1.0) for n, x in self.nodes.items()}
        self.total_gpus = sum(n.gpus for n in self.nodes.values())
        if scenario.usage_mode == "decay":
            self.usage = DecayedUsage(scenario.half_life_days * 86400.0)
            self.user_usage = DecayedUsage(scenario.half_life_days * 86400.0)
        else:
            self.usage = HardWindowUsage(scenario.window_s)
            self.user_usage = HardWindowUsage(scenario.window_s)
        self.pending: dict[str, PendingJob] = {}
        self.running: dict[str, RunningJob] = {}
        self.rate: dict[str, float] = defaultdict(float)  # project -> funded cost-normalised GPUs
        self.user_rate: dict[tuple[str, str], float] = defaultdict(float)
        self.unfunded_rate: dict[str, float] = defaultdict(float)
        self.busy = 0
        self.spent: dict[str, float] = defaultdict(float)  # this period
        self.period = 0
        self.charged_to = 0.0
        self.heap: list = []
        self.seq = 0
        self.drain_req: dict[str, float] = {}
        self.drained_at: dict[str, float | None] = {}
        self.res = SimResult(
            policy,
            0.0,
            scenario,
            self.tree,
            self.total_gpus,
            0.0,
            defaultdict(float),
            defaultdict(float),
            defaultdict(list),
            defaultdict(list),
            0,
            0,
            0,
            0,
            [],
        )
        self.last_pass = -float("inf")
        self.wake_at: float | None = None

    # ---- event plumbing ----------------------------------------------------------------

    def _push(self, t: float, kind: int, payload=None) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, payload))

    def _event(self, t: float, job_id: str, event: str, nodes: str = "", funded: str = ""):
        if self.record:
            self.seq += 1
            self.res.events.append((t, EVENT_ORDER[event], self.seq, job_id, event, nodes, funded))

    # ---- accounting --------------------------------------------------------------------

    def _charge(self, t: float) -> None:
        t0 = self.charged_to
        if t <= t0:
            return
        period_s = self.sc.window_s
        while True:  # split at budget period boundaries
            boundary = (self.period + 1) * period_s
            stop = min(t, boundary)
            dt = stop - t0
            for project, r in self.rate.items():
                if r:
                    self.usage.charge(project, t0, stop, r)
                    self.spent[project] += r * dt
                    self.res.allocated[project] += r * dt
            for key, r in self.user_rate.items():
                if r:
                    self.user_usage.charge(key, t0, stop, r)
            for project, r in self.unfunded_rate.items():
                if r:
                    self.res.unallocated[project] += r * dt
            self.res.busy_gpu_s += self.busy * dt
            t0 = stop
            if stop >= t:
                break
            self.period += 1
            self.spent.clear()
        self.charged_to = t

    def _snapshot(self, t: float) -> Snapshot:
        liens: dict[str, float] = defaultdict(float)
        for r in self.running.values():
            if r.funded and r.protected_until_s > t:
                cost = self.node_cost[r.nodes[0][0]]
                liens[r.project] += (r.protected_until_s - t) * r.gpus * cost
        # Subtree balances, as the live loop gives them: spending counts against every ancestor.
        committed: dict[str, float] = defaultdict(float)
        for p in set(self.spent) | set(liens):
            for anc in ancestors(p):
                committed[anc] += self.spent.get(p, 0.0) + liens.get(p, 0.0)
        budgets = tuple(
            BudgetNode(p, self.shares[p], self.usage.value(p, t), self.grants[p] - committed[p])
            for p in self.shares
        )
        user_usage = {k: self.user_usage.value(k, t) for k in self.user_usage.keys()}
        nodes = tuple(
            replace(n, drained=True) if n.name in self.drain_req else n for n in self.nodes.values()
        )
        return Snapshot(
            t,
            nodes,
            budgets,
            tuple(self.running.values()),
            tuple(self.pending.values()),
            self.sc.gpu_types,
            user_usage,
            (),
            self.policy,
            chain_balances=True,
        )

    # ---- the loop ----------------------------------------------------------------------

    def run(self) -> SimResult:
        for j in self.jobs.values():
            self._push(j.spec.submit_s, _SUBMIT, j.spec.id)
        for node, at in self.sc.maintenance:
            if self.until is None or at <= self.until:
                self._push(at, _DRAIN, node)
        if self.sample_every:
            self._push(0.0, _SAMPLE)
        t = 0.0
        while self.heap:
            t = self.heap[0][0]
            if self.until is not None and t > self.until:
                t = self.until
                break
            need_pass = False
            while self.heap and self.heap[0][0] == t:
                _, kind, _, payload = heapq.heappop(self.heap)
                need_pass |= self._handle(t, kind, payload)
            if not need_pass:
                continue
            if t >= self.last_pass + self.interval:
                self._pass(t)
            elif self.wake_at is None or self.wake_at <= t:
                self.wake_at = self.last_pass + self.interval
                self._push(self.wake_at, _WAKE)
            if self.progress:
                self.progress(t)
            if (
                self.until is None
                and not self.pending
                and not self.running
                and not any(k in (_SUBMIT, _DRAIN) for _, k, _, _ in self.heap)
            ):
                break
        self._charge(t)
        self.res.horizon_s = self.until if self.until is not None else t
        self._finish_report(self.res.horizon_s)
        return self.res

    def _handle(self, t: float, kind: int, payload) -> bool:
        if kind == _SUBMIT:
            state = self.jobs[payload]
            self.res.submitted += 1
            self._enqueue(state)
            self._event(t, payload, SUBMIT)
            return True
        if kind == _FINISH:
            job_id, attempt = payload
            state = self.jobs[job_id]
            if state.attempt != attempt or job_id not in self.running:
                return False  # a stale finish: the job was preempted since
            self._charge(t)
            self._stop(job_id)
            state.left_s = 0.0
            state.end_s = t
            self.res.completed += 1
            self._event(t, job_id, FINISH)
            return True
        if kind == _DRAIN:
            self.drain_req[payload] = t
            self.drained_at[payload] = None
            return True
        if kind == _SAMPLE:
            self._sample(t)
            if self.heap and any(k != _SAMPLE for _, k, _, _ in self.heap):
                self._push(t + self.sample_every, _SAMPLE)
            return False
        return True  # a wake-up or a protection end: time for a pass

    def _enqueue(self, state: JobState) -> None:
        s = state.spec
        self.pending[s.id] = PendingJob(
            s.id,
            s.project,
            s.user,
            s.gpus,
            s.submit_s,
            s.min_runtime_s,
            s.cluster,
            kind=s.kind,
            resumable=s.resumable,
            priority=s.priority,
        )

    def _stop(self, job_id: str) -> RunningJob:
        r = self.running.pop(job_id)
        self._rates(r, -1)
        return r

    def _rates(self, r: RunningJob, sign: int) -> None:
        cost = self.node_cost[r.nodes[0][0]]
        self.busy += sign * r.gpus
        if r.funded:
            self.rate[r.project] += sign * r.gpus * cost
            self.user_rate[(r.project, r.user)] += sign * r.gpus * cost
        else:
            self.unfunded_rate[r.project] += sign * r.gpus * cost

    def _pass(self, t: float) -> None:
        self._charge(t)
        self.last_pass = t
        self.res.passes += 1
        decisions = run_pass(self._snapshot(t), details=False)
        for d in decisions.defunded:  # the budget floor: unallocated from now, no longer charged
            r = self._stop(d.job_id)
            r = replace(r, funded=False)
            self.running[d.job_id] = r
            self._rates(r, +1)
        for p in decisions.preemptions:
            r = self._stop(p.job_id)
            state = self.jobs[p.job_id]
            state.attempt += 1
            ran = t - r.start_s
            state.left_s = max(0.0, state.left_s - ran) if r.resumable else state.spec.duration_s
            self.res.preemptions += 1
            if r.funded and t < r.protected_until_s:
                self.res.protected_preemptions += 1
            self._enqueue(state)
            self._event(t, p.job_id, PREEMPT)
        for s in decisions.starts:
            pj = self.pending.pop(s.job_id)
            state = self.jobs[s.job_id]
            r = RunningJob(
                pj.id,
                pj.project,
                pj.user,
                pj.gpus,
                s.nodes,
                t,
                s.protected_until_s,
                s.funded,
                pj.kind,
                pj.resumable,
                pj.submit_s,
            )
            self.running[pj.id] = r
            self._rates(r, +1)
            if state.first_start_s is None:
                state.first_start_s = t
                wait = t - pj.submit_s
                self.res.waits[pj.project].append(wait)
                self.res.wait_by_size[size_class(pj.gpus)].append(wait)
            self._push(t + state.left_s, _FINISH, (pj.id, state.attempt))
            if s.funded and s.protected_until_s > t:
                self._push(s.protected_until_s, _WAKE)
            self._event(t, pj.id, START, ";".join(n for n, _ in s.nodes), str(s.funded).lower())
        for node in self.drain_req:
            if self.drained_at[node] is None and not any(
                node == n for r in self.running.values() for n, _ in r.nodes
            ):
                self.drained_at[node] = t

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


def simulate(
    scenario: Scenario, jobs: list[TraceJob], policy: str = "fairshare", **kw
) -> SimResult:
    return Simulator(scenario, jobs, policy, **kw).run()
