"""The driver's round: load, kills, one infrastructure restart, settle, check."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable

from tests.faults.conftest import KILLS_PER_ROUND, ROUNDS, System


def run_rounds(
    system: System,
    restarts: list[tuple[str, Callable[[], None]]],
    *,
    sim: bool,
    seed: int,
    jobs_per_round: int = 10,
    max_job_s: int = 12,
    rounds: int = ROUNDS,
    kills_per_round: int = KILLS_PER_ROUND,
    drain_timeout_s: float = 120,
) -> dict:
    """Drive ``rounds`` rounds; returns the numbers and every violation found, by round."""
    rng = random.Random(seed)
    began = time.monotonic()
    report: dict = {"rounds": [], "restarts": {name: 0 for name, _ in restarts}}
    violations: list[str] = []
    repaired: list[str] = []  # seen right after the workers came back, repaired within SETTLE_S
    for number in range(rounds):
        submitted = 0
        lap = Laps()

        def more(n: int, number: int = number) -> None:
            nonlocal submitted
            system.agent(
                "submit", n=n, cluster=system.name, seed=seed * 10_000 + number * 100 + submitted,
                sim=sim, max_s=max_job_s,
            )  # fmt: skip
            submitted += n

        more(jobs_per_round // 2)
        target = system.kills() + kills_per_round
        system.faults.set()
        cancelled = False
        deadline = time.monotonic() + 30 + 4 * kills_per_round
        next_submit = time.monotonic() + 2
        while system.kills() < target:
            system.check_loops()
            if submitted < jobs_per_round and time.monotonic() > next_submit:
                more(2)  # work keeps arriving while workers die: starts, ends, preemptions
                next_submit = time.monotonic() + 2
            if not cancelled and system.kills() >= target - kills_per_round // 2:
                system.agent("cancel", k=rng.randint(0, 2), seed=seed * 1000 + number)
                cancelled = True
            assert time.monotonic() < deadline, f"round {number}: kills too slow ({system.counts})"
            time.sleep(0.2)
        lap("kills")
        name, restart = restarts[number % len(restarts)]
        restart()
        report["restarts"][name] += 1
        lap("restart")
        off = system.quiesce()
        lap("workers_back")
        result = system.settled_check(off)
        lap("check")
        report["rounds"].append(
            {"round": number, "kills": system.kills(), "restart": name, "seconds": lap.seconds,
             **_brief(result)}
        )  # fmt: skip
        violations += [f"round {number}: {v}" for v in result["violations"]]
        repaired += [f"round {number}: {v}" for v in result["repaired_while_settling"]]

    # the end: no more faults or submissions; everything must finish, then the strict check
    drain = time.monotonic()
    off = system.quiesce()
    deadline = time.monotonic() + drain_timeout_s
    while system.agent("unfinished", cluster_name=system.name)["n"] and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(2)
    final = system.settled_check(off, final=True)
    violations += [f"final: {v}" for v in final["violations"]]
    report.update(
        final=_brief(final),
        kills={
            "total": system.kills(),
            "whole_worker": system.counts["worker"],
            "pool_child": system.counts["child"],
            "fault_points": dict(system.point_kills()),
        },
        # Not an invariant (a task that fails is retried by the next tick), but worth watching.
        deadlocks=sum(
            log.read_text(errors="replace").count("OperationalError('deadlock detected")
            for log in system.root.glob("worker*.log")
        ),
        duration_s=round(time.monotonic() - began, 1),
        drain_s=round(time.monotonic() - drain, 1),
        max_in_between_s=max(r["max_in_between_s"] for r in report["rounds"]) if rounds else 0,
        violations=violations,
        repaired_while_settling=repaired,
    )
    (system.root / "report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "rounds"}, indent=2))
    return report


class Laps:
    """How long each phase of a round took (where the suite's time goes)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.mark = time.monotonic()

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        self.seconds[name] = round(now - self.mark, 1)
        self.mark = now


def _brief(result: dict) -> dict:
    return {
        "states": result["states"],
        "attempts": result["attempts"],
        "events": result["events"],
        "charged_gpu_s": result["charged_gpu_s"],
        "occupancy_gpu_s": result["expected_gpu_s"],
        "max_in_between_s": result["max_in_between_s"],
        "violations": len(result["violations"]),
    }
