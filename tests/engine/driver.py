"""A tiny multi-pass driver for engine tests: apply a pass's decisions, let time pass,
charge usage to the running jobs' projects, finish jobs whose work is done, and pass again.
The real simulator lives in scheduling/engine/sim/; this one keeps only what the rules
under test need, so a test reads in a few lines."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from scheduling.engine import schedule
from scheduling.engine.model import BudgetNode, PendingJob, RunningJob, Snapshot

HAS_MEMORY = "displacements" in {f.name for f in fields(Snapshot)}


@dataclass
class Driver:
    snap: Snapshot
    work_s: dict[str, float]  # job id -> seconds of work it needs
    # (time, victim, preemptor, was the victim funded)
    preemptions: list[tuple[float, str, str | None, bool]] = field(default_factory=list)
    finished: dict[str, float] = field(default_factory=dict)
    charged_gpu_s: float = 0.0

    def step(self, dt: float) -> None:
        d = schedule(self.snap)
        snap = self.snap
        now = snap.now_s
        running = {r.id: r for r in snap.running}
        pending = {j.id: j for j in snap.pending}
        for p in d.preemptions:
            r = running.pop(p.job_id)
            self.preemptions.append((now, p.job_id, p.by_job_id, r.funded))
            pending[r.id] = PendingJob(
                r.id, r.project, r.user, r.gpus, r.submit_s, 0.0, resumable=r.resumable
            )
            if not r.resumable:
                self.work_s[r.id] = self.work_s.get(f"total:{r.id}", self.work_s[r.id])
        for s in d.starts:
            j = pending.pop(s.job_id)
            self.work_s.setdefault(f"total:{j.id}", self.work_s[j.id])
            running[j.id] = RunningJob(
                j.id, j.project, j.user, j.gpus, s.nodes, now, s.protected_until_s, s.funded,
                resumable=j.resumable, submit_s=j.submit_s,
            )  # fmt: skip
        usage = {b.path: b.usage_gpu_s for b in snap.budgets}
        for r in list(running.values()):
            ran = min(dt, self.work_s[r.id])
            self.work_s[r.id] -= ran
            usage[r.project] = usage.get(r.project, 0.0) + r.gpus * ran
            self.charged_gpu_s += r.gpus * ran
            if self.work_s[r.id] <= 0:
                self.finished[r.id] = now + ran
                del running[r.id]
        budgets = tuple(replace(b, usage_gpu_s=usage.get(b.path, 0.0)) for b in snap.budgets)
        extra = {"displacements": d.displacements} if HAS_MEMORY else {}
        self.snap = replace(
            snap,
            now_s=now + dt,
            budgets=budgets,
            running=tuple(running.values()),
            pending=tuple(pending.values()),
            **extra,
        )


def sibling_budgets(usage_a: float = 0.0, usage_b: float = 0.0) -> tuple[BudgetNode, ...]:
    return (BudgetNode("a", 1.0, usage_a, 1e12), BudgetNode("b", 1.0, usage_b, 1e12))
