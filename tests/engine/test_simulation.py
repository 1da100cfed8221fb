"""The simulator on small synthetic scenarios: the behaviours the design promises."""

from scheduling.engine.sim import simulate
from scheduling.engine.sim.output import to_json
from scheduling.engine.sim.scenario import BudgetSpec, ClusterSpec, Scenario, TraceJob

HOUR = 3600.0


def scenario(budgets, nodes=1, gpus=8, maintenance=()):
    return Scenario(
        window_days=7,
        gpu_types={"H100": 1.0},
        clusters=(ClusterSpec("c", "H100", nodes, gpus),),
        budgets=tuple(BudgetSpec(p, h, h) for p, h in budgets),
        maintenance=tuple(maintenance),
    )


def job(jid, submit, project, gpus=1, duration=HOUR, min_runtime=HOUR, user=None):
    return TraceJob(
        jid, submit, project, user or project, gpus, duration, min_runtime, True, "batch", None
    )


def test_delivered_shares_converge_to_budget_shares_under_saturation():
    sc = scenario([("big", 3000), ("small", 1000)])
    jobs = [
        job(f"{p}{i}", 0.0, p, duration=2 * HOUR, min_runtime=HOUR)
        for p in ("big", "small")
        for i in range(400)
    ]
    out = to_json(simulate(sc, jobs, "fairshare", until_s=4 * 24 * HOUR, record_events=False))
    assert abs(out["projects"]["big"]["delivered_share"] - 0.75) < 0.03
    assert abs(out["projects"]["small"]["delivered_share"] - 0.25) < 0.03
    fifo = to_json(simulate(sc, jobs, "fifo", until_s=4 * 24 * HOUR, record_events=False))
    assert fifo["share_distance"] > out["share_distance"] + 0.1


def test_unfunded_work_yields_to_funded_work_at_once():
    sc = scenario([("paid", 1000)])
    jobs = [job(f"free{i}", 0.0, "", duration=48 * HOUR) for i in range(8)]
    jobs.append(job("urgent", 5 * HOUR, "paid", gpus=8, duration=HOUR))
    res = simulate(sc, jobs, "fairshare")
    out = to_json(res)
    assert out["projects"]["paid"]["wait_p50_s"] <= 60.0
    assert out["unfunded_gpu_hours"] >= 8 * 5
    assert out["jobs"]["preemptions"] == 8 and out["jobs"]["protected_preemptions"] == 0


def test_a_large_job_starts_once_the_protections_of_small_jobs_end():
    sc = scenario([("crowd", 100), ("wide", 100)], nodes=2)
    # The crowd is busy for days but only protected for two hours from its start.
    crowd = [
        job(f"s{i}", 0.0, "crowd", duration=5 * 24 * HOUR, min_runtime=2 * HOUR) for i in range(16)
    ]
    more = [
        job(f"t{i}", 1800.0 * (i + 1), "crowd", duration=5 * 24 * HOUR, min_runtime=2 * HOUR)
        for i in range(40)
    ]
    big = job("big", HOUR, "wide", gpus=16, duration=HOUR)
    res = simulate(sc, crowd + more + [big], "fairshare", until_s=24 * HOUR)
    starts = [e for e in res.events if e[3] == "big" and e[4] == "start"]
    assert starts and 2 * HOUR <= starts[0][0] <= 2 * HOUR + 60
    fifo = simulate(sc, crowd + more + [big], "fifo", until_s=24 * HOUR)
    assert not [e for e in fifo.events if e[3] == "big" and e[4] == "start"]


def test_a_drain_finishes_within_the_protection_bound():
    sc = scenario([("a", 1000)], nodes=2, maintenance=[("c-00", 2 * HOUR)])
    jobs = [
        job(f"j{i}", 0.0, "a", duration=10 * 24 * HOUR, min_runtime=30 * HOUR) for i in range(16)
    ]
    out = to_json(simulate(sc, jobs, "fairshare", until_s=3 * 24 * HOUR))
    (drain,) = out["drains"]
    assert drain["node"] == "c-00" and drain["requested_s"] == 2 * HOUR
    assert drain["drained_s"] is not None
    assert drain["drained_s"] - drain["requested_s"] <= 8 * HOUR + 60  # the 8 h cap bounds it
