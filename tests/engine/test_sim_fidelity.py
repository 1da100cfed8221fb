"""Scenario tests for the simulator's bugs, found against the live loop: each failed before its fix.

Passes where the live loop would make them, exact times, complete event rows, a horizon that
ends with the work, budgets that roll up the tree, and what preemption really costs."""

import csv
from dataclasses import replace

import pytest

from scheduling.engine.model import Policy
from scheduling.engine.sim import Simulator, simulate
from scheduling.engine.sim.costs import PreemptionCost
from scheduling.engine.sim.output import to_json, write_events
from scheduling.engine.sim.scenario import (
    BudgetSpec,
    ClusterSpec,
    InputError,
    Scenario,
    TraceJob,
    load_scenario,
)

HOUR = 3600.0


def scenario(budgets, nodes=1, gpus=8, preemption=None, shares=None):
    return Scenario(
        window_days=7,
        gpu_types={"H100": 1.0},
        clusters=(ClusterSpec("c", "H100", nodes, gpus),),
        budgets=tuple(BudgetSpec(p, h, (shares or {}).get(p, h)) for p, h in budgets),
        preemption=preemption or PreemptionCost(),
    )


def job(jid, submit, project, gpus=1, duration=HOUR, min_runtime=HOUR, resumable=True):
    return TraceJob(
        jid,
        submit,
        project,
        project or "nobody",
        gpus,
        duration,
        min_runtime,
        resumable,
        "batch",
        None,
    )


def starts(res, jid=None):
    return [e for e in res.events if e[4] == "start" and (jid is None or e[3] == jid)]


# ---- 1. passes where they matter ------------------------------------------------------------


def test_funded_jobs_left_behind_by_the_search_budget_start_within_minutes_not_an_hour():
    """A cluster full of unfunded work; 80 funded jobs arrive at once. One pass may search for
    victims only so often per pool; the old simulator then waited for the next submission (an
    hour later) while unfunded jobs kept the GPUs."""
    sc = scenario([("paid", 100_000)], nodes=10)
    jobs = [job(f"free{i}", 0.0, "", duration=100 * HOUR) for i in range(80)]
    jobs += [job(f"paid{i}", HOUR, "paid", duration=10 * HOUR) for i in range(80)]
    jobs.append(job("late", 2 * HOUR, "paid"))  # the next event after the burst
    res = simulate(sc, jobs, "fairshare", until_s=3 * HOUR)
    waited = [starts(res, f"paid{i}")[0][0] - HOUR for i in range(80)]
    assert max(waited) <= 10 * 60


def test_unfunded_work_fills_what_a_preempting_pass_left_idle():
    """The GPUs a preemption frees beyond what the preemptor needs go to waiting unfunded work
    (in the same pass since the engine backfills after a preemption; at the latest one pass
    later): the old simulator left them idle until the next trace event."""
    sc = scenario([("paid", 100_000)], nodes=2)
    jobs = [job(f"free{i}", 0.0, "", gpus=4, duration=100 * HOUR) for i in range(4)]
    jobs.append(job("filler", 1.0, "", gpus=2, duration=100 * HOUR))  # waits: no room
    jobs.append(job("paid", HOUR, "paid", gpus=2, duration=50 * HOUR))  # frees 4, needs 2
    jobs.append(job("next", 20 * HOUR, "paid"))
    res = simulate(sc, jobs, "fairshare", until_s=21 * HOUR)
    assert len([e for e in res.events if e[4] == "preempt" and e[0] < 2 * HOUR]) == 1
    assert HOUR <= starts(res, "filler")[0][0] <= HOUR + 5 * 60


def test_a_job_preempts_as_soon_as_usage_drift_lets_it_not_at_the_next_trace_event():
    """b used the node for two hours, then a runs for ten. b's next job cannot preempt a
    while a has used less than b; usage crosses at 4 h with no trace event near (a ends at
    12 h). The live loop would preempt at its first pass after the crossing."""
    sc = scenario([("a", 1000), ("b", 1000)])
    jobs = [
        job("b0", 0.0, "b", gpus=8, duration=2 * HOUR),
        job("a1", 2 * HOUR, "a", gpus=8, duration=10 * HOUR, min_runtime=600),
        job("b1", 2 * HOUR + 1, "b", gpus=8, duration=HOUR, min_runtime=600),
    ]
    res = simulate(sc, jobs, "fairshare", until_s=13 * HOUR)
    assert 4 * HOUR < starts(res, "b1")[0][0] <= 4 * HOUR + 120


def test_work_that_ran_out_of_budget_is_funded_when_the_grants_renew():
    """a spends its grant; its 16-GPU job cannot start unfunded (the node is taken by free
    work, which only funded work may preempt). The grants renew at 24 h with no trace event."""
    sc = replace(scenario([("a", 10)], nodes=2), window_days=1)
    jobs = [
        job("a0", 0.0, "a", gpus=8, duration=2 * HOUR, min_runtime=600),
        job("free", 0.0, "", gpus=8, duration=100 * HOUR),
        job("a1", 3 * HOUR, "a", gpus=16, duration=HOUR, min_runtime=600),
    ]
    res = simulate(sc, jobs, "fairshare", until_s=30 * HOUR)
    assert 24 * HOUR <= starts(res, "a1")[0][0] <= 24 * HOUR + 60


# ---- 2. exact times, and the contract slips -------------------------------------------------


def test_event_times_past_a_million_seconds_are_exact(tmp_path):
    sc = scenario([("a", 100_000)])
    res = simulate(sc, [job("j", 2_339_371.0, "a", duration=1234.5)])
    out = tmp_path / "events.csv"
    write_events(res, str(out))
    rows = {(r["event"]): r["t_s"] for r in csv.DictReader(out.open())}
    assert rows == {"submit": "2339371", "start": "2339371", "finish": "2340605.500"}


def test_a_zero_duration_job_finishes_after_it_starts(tmp_path):
    sc = scenario([("a", 1000)])
    res = simulate(sc, [job("z", 100.0, "a", duration=0.0)])
    out = tmp_path / "events.csv"
    write_events(res, str(out))
    assert [r["event"] for r in csv.DictReader(out.open())] == ["submit", "start", "finish"]


def test_preempt_and_finish_rows_name_the_nodes_the_job_leaves():
    sc = scenario([("paid", 1000)], nodes=2)
    jobs = [job("free", 0.0, "", gpus=16, duration=10 * HOUR), job("paid", HOUR, "paid", gpus=8)]
    res = simulate(sc, jobs, "fairshare")
    rows = {(e[3], e[4]): e[5] for e in res.events}
    assert rows[("free", "preempt")] == "c-00;c-01"
    assert rows[("paid", "finish")] == rows[("paid", "start")] != ""


def test_a_job_that_can_never_fit_does_not_stretch_the_horizon_or_deflate_utilisation():
    sc = scenario([("a", 1000)], nodes=1)
    jobs = [job("ok", 0.0, "a", gpus=8, duration=HOUR), job("huge", 600.0, "a", gpus=64)]
    out = to_json(simulate(sc, jobs, "fairshare"))
    assert out["horizon_s"] == HOUR
    assert out["utilization"] == 1.0


# ---- budgets roll up the tree ---------------------------------------------------------------


def test_a_parent_budget_node_gets_its_grant_minus_its_subtree_usage_as_remaining():
    sc = scenario([("P", 10), ("P/a", 6), ("P/b", 4)])
    sim = Simulator(sc, [job("j", 0.0, "P/a", gpus=4, duration=HOUR, min_runtime=600)])
    sim.run()  # one hour of 4 GPUs charged to P/a this period
    remaining = sim.remaining(sim.res.horizon_s)
    assert remaining["P/a"] == pytest.approx((6 - 4) * HOUR)
    assert remaining["P/b"] == pytest.approx(4 * HOUR)
    assert remaining["P"] == pytest.approx((10 - 4) * HOUR)  # the old simulator said 10 h


def test_a_running_jobs_lien_counts_against_every_ancestor():
    sc = scenario([("P", 10), ("P/a", 6), ("P/b", 4)])
    sim = Simulator(sc, [job("j", 0.0, "P/a", gpus=2, duration=10 * HOUR, min_runtime=HOUR)])
    sim.until = 0.0
    sim.run()
    snap = sim._snapshot(0.0, sim.remaining(0.0))
    left = {b.path: b.remaining_gpu_s for b in snap.budgets}
    assert left == {"P": 8 * HOUR, "P/a": 4 * HOUR, "P/b": 4 * HOUR}


def test_the_loader_refuses_children_granted_more_than_their_parent_naming_the_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        "clusters:\n"
        "  - {name: c, gpu_type: H100, nodes: 1}\n"
        "budgets:\n"
        "  - name: P\n"
        "    gpu_hours: 10\n"
        "    children:\n"
        "      - {name: a, gpu_hours: 6}\n"
        "      - {name: b, gpu_hours: 24}\n"
    )
    with pytest.raises(InputError, match=r"s\.yaml:8: field 'gpu_hours': P/b .* P holds 10"):
        load_scenario(str(path))


# ---- 5b. no ping-pong in a replay ------------------------------------------------------------


def test_a_replay_carries_who_displaced_whom_so_two_sibling_jobs_do_not_swap(monkeypatch):
    """The swap case, replayed: siblings a and b with equal grants, one 8-GPU job each,
    no protection, not resumable, on one 8-GPU node. The simulator hands each pass the
    memory the last one returned (``Decisions.displacements``); dropped between passes, the
    pair swaps every interval (checked below), each run restarting from zero."""
    sc = scenario([("a", 100), ("b", 100)])
    jobs = [
        job("a1", 0.0, "a", gpus=8, duration=2 * HOUR, min_runtime=0, resumable=False),
        job("b1", 1.0, "b", gpus=8, duration=2 * HOUR, min_runtime=0, resumable=False),
    ]
    res = simulate(sc, jobs, "fairshare", until_s=12 * HOUR, pass_interval_s=300.0)
    assert res.preemptions <= 1
    assert res.completed == 2

    forgetful = Simulator._pass

    def forget(self, t):  # the old simulator: no memory from one pass to the next
        self.displacements = ()
        return forgetful(self, t)

    monkeypatch.setattr(Simulator, "_pass", forget)
    swapped = simulate(sc, jobs, "fairshare", until_s=12 * HOUR, pass_interval_s=300.0)
    assert swapped.preemptions > 5


def test_a_pass_follows_the_end_of_a_displacement_memory():
    """b1 displaces a1 for standing; a1 may not preempt back while the memory lasts (8 h:
    b's side never falls below the release share here, two equal siblings). When it ends,
    a1 (now the under-served side) preempts b1 at the live loop's next pass. Nothing else
    happens then — no arrival, finish or protection end, no standing crossing — so an
    event-driven replay has to wake for the expiry itself, not wait for b1's finish."""
    sc = scenario([("a", 1000), ("b", 1000)])
    jobs = [
        job("a1", 0.0, "a", gpus=8, duration=40 * HOUR, min_runtime=0),
        job("b1", 1.0, "b", gpus=8, duration=40 * HOUR, min_runtime=0),
    ]
    res = simulate(sc, jobs, "fairshare", until_s=60 * HOUR, pass_interval_s=300.0)
    preempted = [(e[0], e[3]) for e in res.events if e[4] == "preempt"]
    first_at, first = preempted[0]
    assert first == "a1"
    memory = Policy().displacement_memory_s  # 8 h
    back = [t for t, jid in preempted if jid == "b1"]
    assert back, preempted
    assert first_at + memory <= back[0] <= first_at + memory + 300.0


def test_a_pass_follows_two_users_trading_places_in_their_project():
    """One project, two users, one 8-GPU node. u1's 6-GPU run starts when u2's earlier run
    ends (u1 has used less); u1's 8-GPU job then waits first and holds the node with no known
    start, so u2's 2-GPU job may not take the two free GPUs. u1's usage passes u2's at 8,400 s
    (8 GPU-hours at 6 GPUs): from then u2's job comes first and starts there — at the live
    loop's next pass, though no job arrives, ends or leaves its protection then."""
    sc = scenario([("p", 1000)])
    jobs = [
        replace(job("r2", 0.0, "p", gpus=8, duration=HOUR, min_runtime=0), user="u2"),
        replace(job("r1", 10.0, "p", gpus=6, duration=20 * HOUR, min_runtime=0), user="u1"),
        replace(job("j1", 20.0, "p", gpus=8, duration=HOUR, min_runtime=0), user="u1"),
        replace(job("j2", 30.0, "p", gpus=2, duration=HOUR, min_runtime=0), user="u2"),
    ]
    res = simulate(sc, jobs, "fairshare", until_s=30 * HOUR, pass_interval_s=300.0)
    starts = {e[3]: e[0] for e in res.events if e[4] == "start"}
    assert starts["r1"] == HOUR
    assert HOUR + 8 * HOUR / 6 <= starts["j2"] <= HOUR + 8 * HOUR / 6 + 300.0


def test_the_standing_watch_predicts_when_two_siblings_on_one_side_of_one_trade_places():
    """Three equal siblings: a runs 6 GPUs, c 16 (two nodes), b ran 8 for an hour.
    At 1 h, a (6 GPU-hours) ranks before b (8) and both are under their share while c is
    over it: a passes b at 4,800 s with no side of 1 moving, and the watch must say so (the
    order is which waiting job comes first, and so which one holds freed nodes)."""
    sc = scenario([("a", 1000), ("b", 1000), ("c", 1000)], nodes=4)
    jobs = [
        job("ra", 0.0, "a", gpus=6, duration=20 * HOUR, min_runtime=0),
        job("rb", 0.0, "b", gpus=8, duration=HOUR, min_runtime=0),
        job("rc", 0.0, "c", gpus=16, duration=20 * HOUR, min_runtime=0),
    ]
    sim = Simulator(sc, jobs, "fairshare", until_s=HOUR, pass_interval_s=300.0)
    sim.run()
    watch = sim.standing
    lines = watch._lines(HOUR)
    assert all(g >= 0 for p, (g, _) in lines.items() if p in ("a", "b"))  # under share
    assert lines["c"][0] < 0  # over it
    order = watch._order(HOUR)
    assert order[0] == (("a", "b", "c"),)
    assert watch._swap_at(HOUR) == pytest.approx(4800.0)
    sim._charge(4801.0)
    watch._lines(4801.0)
    assert watch._order(4801.0)[0] == (("b", "a", "c"),)


# ---- 6. preemption has a cost ---------------------------------------------------------------


def preempted_once(cost, resumable=True):
    """An unfunded 8-GPU job runs 100 min, is preempted by a funded one for 2 h, then resumes."""
    sc = scenario([("paid", 1000)], preemption=cost)
    jobs = [
        job("free", 0.0, "", gpus=8, duration=10 * HOUR, resumable=resumable),
        job("paid", 6000.0, "paid", gpus=8, duration=2 * HOUR),
    ]
    return simulate(sc, jobs, "fairshare")


def test_without_the_preemption_key_a_resumable_job_loses_nothing():
    res = preempted_once(None)
    out = to_json(res)
    assert out["wasted_gpu_hours"] == 0
    finish = next(e[0] for e in res.events if e[3] == "free" and e[4] == "finish")
    assert finish == 10 * HOUR + 2 * HOUR  # its 10 h of work, plus the 2 h it waited


def test_a_preempted_job_loses_the_work_since_its_checkpoint_and_pays_the_restart():
    res = preempted_once(PreemptionCost(checkpoint_interval_s=1800, restart_overhead_s=300))
    out = to_json(res)
    # 6000 s of progress, last checkpoint at 5400 s: 600 s lost on 8 GPUs, then 300 s restart
    assert out["wasted_gpu_hours"] == pytest.approx(8 * (600 + 300) / HOUR, abs=1e-3)
    finish = next(e[0] for e in res.events if e[3] == "free" and e[4] == "finish")
    assert finish == 10 * HOUR + 2 * HOUR + 600 + 300


def test_a_job_that_is_not_resumable_loses_its_whole_attempt():
    out = to_json(preempted_once(PreemptionCost(1800, 300), resumable=False))
    assert out["wasted_gpu_hours"] == pytest.approx(8 * (6000 + 300) / HOUR, abs=1e-3)


def test_wasted_hours_are_reported_per_project():
    sc = scenario([("hi", 1000), ("lo", 1000)], preemption=PreemptionCost(1800, 300))
    jobs = [job("lo-job", 0.0, "lo", gpus=8, duration=20 * HOUR, min_runtime=600)]
    jobs += [job(f"hi{i}", 3 * HOUR + 600 + i, "hi", gpus=8, duration=HOUR) for i in range(2)]
    out = to_json(simulate(sc, jobs, "fairshare", until_s=10 * HOUR))
    assert out["projects"]["lo"]["wasted_gpu_hours"] > 0
    assert out["projects"]["hi"]["wasted_gpu_hours"] == 0
    assert out["wasted_gpu_hours"] == out["projects"]["lo"]["wasted_gpu_hours"]


def test_gpus_idle_while_a_fundable_job_cannot_be_placed_count_as_fragmentation():
    """Two 8-GPU nodes, a protected 6-GPU job on each: 4 GPUs idle in two holes of 2, and a
    funded 4-GPU job that fits in neither waits two hours."""
    sc = scenario([("a", 1000), ("b", 1000)], nodes=2)
    jobs = [
        job(f"six{i}", 0.0, "a", gpus=6, duration=2 * HOUR, min_runtime=2 * HOUR) for i in (0, 1)
    ]
    jobs.append(job("four", 0.0, "b", gpus=4, duration=HOUR))
    res = simulate(sc, jobs, "fairshare")
    assert starts(res, "four")[0][0] == 2 * HOUR
    out = to_json(res)
    assert out["fragmentation_gpu_hours"] == pytest.approx(4 * 2)
    assert out["projects"]["b"]["fragmentation_gpu_hours"] == pytest.approx(4 * 2)
    assert out["projects"]["a"]["fragmentation_gpu_hours"] == 0
