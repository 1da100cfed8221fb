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
    for number in range(rounds):
        system.agent(
            "submit", n=jobs_per_round, cluster=system.name, seed=seed * 1000 + number, sim=sim,
            max_s=max_job_s,
        )  # fmt: skip
        target = system.kills() + kills_per_round
        system.faults.set()
        cancelled = False
        deadline = time.monotonic() + 30 + 4 * kills_per_round
        while system.kills() < target:
            system.check_loops()
            if not cancelled and system.kills() >= target - kills_per_round // 2:
                system.agent("cancel", k=rng.randint(0, 2), seed=seed * 1000 + number)
                cancelled = True
            assert time.monotonic() < deadline, f"round {number}: kills too slow ({system.counts})"
            time.sleep(0.2)
        name, restart = restarts[number % len(restarts)]
        restart()
        report["restarts"][name] += 1
        system.quiesce()
        result = system.check()
        report["rounds"].append(
            {"round": number, "kills": system.kills(), "restart": name, **_brief(result)}
        )
        violations += [f"round {number}: {v}" for v in result["violations"]]

    # the end: no more faults or submissions; everything must finish, then the strict check
    system.quiesce()
    deadline = time.monotonic() + drain_timeout_s
    while system.agent("unfinished", cluster_name=system.name)["n"] and time.monotonic() < deadline:
        time.sleep(1)
    time.sleep(2)
    final = system.check(final=True)
    violations += [f"final: {v}" for v in final["violations"]]
    report.update(
        final=_brief(final),
        kills={
            "total": system.kills(),
            "whole_worker": system.counts["worker"],
            "pool_child": system.counts["child"],
            "fault_points": dict(system.point_kills()),
        },
        duration_s=round(time.monotonic() - began, 1),
        violations=violations,
    )
    (system.root / "report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "rounds"}, indent=2))
    return report


def _brief(result: dict) -> dict:
    return {
        "states": result["states"],
        "attempts": result["attempts"],
        "events": result["events"],
        "charged_gpu_s": result["charged_gpu_s"],
        "violations": len(result["violations"]),
    }
