"""What holds and the pass interval cost, and how often one job is preempted: the simulator's
``idle_while_fits_gpu_hours`` and per-job preemption counts, on scenarios small enough to
work the answer out by hand."""

import pytest

from scheduling.engine.sim import simulate
from scheduling.engine.sim.costs import PreemptionCost
from scheduling.engine.sim.output import to_json
from tests.engine.test_sim_fidelity import HOUR, job, scenario, starts


def held_behind_a_protected_job(extra=()):
    """Two 8-GPU nodes. ``run`` (a, 8 GPUs, protected 2 h) starts at 0 on one node; ``big``
    (b, 16 GPUs) arrives at 60 s: it needs both nodes whole, may not preempt protected work,
    and holds them from 2 h. The other node sits idle meanwhile."""
    sc = scenario([("a", 1000), ("b", 1000)], nodes=2)
    jobs = [
        job("run", 0.0, "a", gpus=8, duration=2 * HOUR, min_runtime=2 * HOUR),
        job("big", 60.0, "b", gpus=16, duration=HOUR),
        *extra,
    ]
    return simulate(sc, jobs, "fairshare")


def test_an_idle_node_a_waiting_job_does_not_fit_is_not_idle_while_fits():
    res = held_behind_a_protected_job()
    assert starts(res, "big")[0][0] == 2 * HOUR
    out = to_json(res)
    assert out["idle_while_fits_gpu_hours"] == 0
    assert out["fragmentation_gpu_hours"] > 0  # idle beside it all the same


def test_a_funded_job_kept_off_the_held_node_counts_its_idle_gpus():
    """``small`` (b, 4 GPUs, 3 h) fits the idle node from 120 s but may not backfill it: it
    would still run when the hold starts. The node's 8 idle GPUs count until ``big`` takes
    both nodes at 2 h."""
    small = job("small", 120.0, "b", gpus=4, duration=3 * HOUR)
    res = held_behind_a_protected_job([small])
    assert starts(res, "big")[0][0] == 2 * HOUR
    assert starts(res, "small")[0][0] == 3 * HOUR  # after big
    assert res.idle_while_fits == pytest.approx(8 * (2 * HOUR - 120))
    assert to_json(res)["idle_while_fits_gpu_hours"] == round(8 * (2 * HOUR - 120) / HOUR, 3)


def test_a_job_whose_budget_cannot_fund_it_does_not_count():
    """The same 4-GPU job in a project holding less than its lien: it is not a funded job
    waiting (it runs unfunded on the idle node at once)."""
    sc = scenario([("a", 1000), ("b", 1000), ("c", 1)], nodes=2)
    jobs = [
        job("run", 0.0, "a", gpus=8, duration=2 * HOUR, min_runtime=2 * HOUR),
        job("big", 60.0, "b", gpus=16, duration=HOUR),
        job("poor", 120.0, "c", gpus=4, duration=3 * HOUR),
    ]
    res = simulate(sc, jobs, "fairshare")
    assert res.idle_while_fits == 0


@pytest.mark.parametrize("gpus", [8, 16])
def test_gpus_freed_between_passes_count_until_the_next_pass(gpus):
    """``first`` ends at 1,830 s; ``second`` (as large) has waited since the pass at 1,800 s.
    The next pass may come only one interval after that one, at 1,860 s: the freed GPUs
    (one node, or two whole nodes for a 16-GPU job) sit idle 30 s while it fits them."""
    sc = scenario([("a", 1000)], nodes=2 if gpus > 8 else 1)
    jobs = [
        job("first", 0.0, "a", gpus=gpus, duration=1830, min_runtime=600),
        job("second", 1800.0, "a", gpus=gpus, duration=600, min_runtime=600),
    ]
    res = simulate(sc, jobs, "fairshare")
    assert starts(res, "second")[0][0] == 1860
    assert res.idle_while_fits == pytest.approx(gpus * 30)


def test_preemptions_are_counted_per_job():
    """An unfunded 8-GPU job preempted by a funded one, then resumed; a second unfunded job
    preempted twice by two funded jobs in turn."""
    sc = scenario([("paid", 1000)], nodes=2, preemption=PreemptionCost(1800, 300))
    jobs = [
        job("free-a", 0.0, "", gpus=8, duration=10 * HOUR),
        job("free-b", 0.0, "", gpus=8, duration=10 * HOUR),
        job("paid1", HOUR, "paid", gpus=8, duration=HOUR),
        job("paid2", 3 * HOUR, "paid", gpus=8, duration=HOUR),
    ]
    res = simulate(sc, jobs, "fairshare")
    out = to_json(res)["jobs"]
    assert out["preemptions"] == sum(res.preempted.values()) == 2
    assert out["max_preemptions_per_job"] == max(res.preempted.values())
    assert out["most_preempted"] == [
        {"job_id": j, "preemptions": n}
        for j, n in sorted(res.preempted.items(), key=lambda x: (-x[1], x[0]))
    ]


def test_the_most_preempted_list_is_the_top_five_by_count_then_id():
    """Six unfunded 1-GPU jobs on one 8-GPU node, preempted over and over by funded 8-GPU
    jobs arriving hourly: the list holds five of them, most preempted first."""
    sc = scenario([("paid", 10_000)], nodes=1)
    jobs = [job(f"free{i}", 0.0, "", gpus=1, duration=100 * HOUR) for i in range(6)]
    jobs += [job(f"paid{i}", (2 * i + 1) * HOUR, "paid", gpus=8, duration=HOUR) for i in range(3)]
    res = simulate(sc, jobs, "fairshare", until_s=8 * HOUR)
    out = to_json(res)["jobs"]
    assert res.preempted == {f"free{i}": 3 for i in range(6)}
    assert out["max_preemptions_per_job"] == 3
    assert out["most_preempted"] == [{"job_id": f"free{i}", "preemptions": 3} for i in range(5)]


def test_without_preemptions_the_counts_are_empty():
    out = to_json(held_behind_a_protected_job())["jobs"]
    assert out["max_preemptions_per_job"] == 0 and out["most_preempted"] == []
