"""One test per engine bug found in the engine; each fails on the engine before the fix."""

from scheduling.engine import schedule
from scheduling.engine.model import Policy

from .helpers import budgets, nodes, pend, preempted, run, snap, started

NOW = 100_000.0


# ---- 3: a sound victim search ----------------------------------------------------------------

# P/a ranks above P/b (LFS 0.83 vs 0.67), but both are over their share, so P/a may not preempt
# inside P/b (hysteresis); inside P/b, P/b/d (never used) may preempt P/b/c (over its share).
HIERARCHY = budgets(
    ("P", 1, 0),
    ("P/a", 1, 400),
    ("P/b", 1, 0),
    ("P/b/c", 1, 500),
    ("P/b/d", 1, 0),
    ("P/e", 1, 100),
)


def test_a_worse_ranked_job_still_preempts_where_a_better_one_found_no_victims():
    running = [run("V", "P/b/c", 8, "c-00", protected_until=NOW - 1)]
    jobs = [pend("J1", "P/a", 8, submit=1), pend("J2", "P/b/d", 8, submit=2)]
    alone = schedule(snap(nodes(1), HIERARCHY, running, jobs[1:]))
    assert set(preempted(alone)) == {"V"} and "J2" in started(alone)
    d = schedule(snap(nodes(1), HIERARCHY, running, jobs))
    assert set(preempted(d)) == {"V"}
    assert set(started(d)) == {"J2"}
    assert d.pending["J1"].code in ("Priority", "Resources")


# ---- idle GPUs after a preemption --------------------------------------------------------------

TREE = budgets(("hi", 1, 0), ("lo", 1, 1000))


def test_a_pass_that_preempted_still_backfills_the_gpus_left_idle_with_unfunded_work():
    running = [run("U", "", 8, "c-00", funded=False)]
    jobs = [pend("J", "hi", 2, submit=1), pend("free", "", 1, submit=2)]
    d = schedule(snap(nodes(1), TREE, running, jobs))
    assert set(preempted(d)) == {"U"}
    assert started(d)["J"].funded
    assert "free" in started(d) and not started(d)["free"].funded


# ---- 5: interactive limits for everyone ------------------------------------------------------


def test_unfunded_interactive_sessions_respect_the_pool():
    lane = Policy(interactive_pool_gpus={"c": 1}, interactive_per_user=1)
    jobs = [
        pend("s1", "", 1, kind="interactive", user="ana", submit=1),
        pend("s2", "", 1, kind="interactive", user="ben", submit=2),
    ]
    d = schedule(snap(nodes(1), TREE, pending=jobs, policy=lane))
    assert set(started(d)) == {"s1"}
    assert d.pending["s2"].code == "InteractiveLimit"


def test_interactive_pool_holds_under_the_baselines_too():
    for name in ("fifo", "priority"):
        lane = Policy(name=name, interactive_pool_gpus={"c": 2}, interactive_per_user=1)
        jobs = [
            pend(f"s{k}", "hi", 2, kind="interactive", user=f"u{k}", submit=k) for k in range(3)
        ]
        d = schedule(snap(nodes(1), TREE, pending=jobs, policy=lane))
        assert len(d.starts) == 1, name


# ---- 5b: no ping-pong across passes ----------------------------------------------------------


def test_two_sibling_jobs_do_not_swap_places_pass_after_pass():
    """The swap case: a and b, equal grants, 8 GPUs each, min_runtime 0, not resumable,
    one 8-GPU node, a pass every 300 s. They used to swap every 300 s until both budgets were
    spent; now b displaces a once, runs its hour, and a runs after it."""
    from .driver import Driver, sibling_budgets

    jobs = [
        pend("a1", "a", 8, submit=0, min_runtime=0, resumable=False),
        pend("b1", "b", 8, submit=1, min_runtime=0, resumable=False),
    ]
    drv = Driver(snap(nodes(1), sibling_budgets(), pending=jobs, now=0.0), {"a1": 3600, "b1": 3600})
    for _ in range(60):  # five hours
        drv.step(300.0)
    assert len(drv.preemptions) <= 1
    assert set(drv.finished) == {"a1", "b1"}
    assert drv.charged_gpu_s <= 8 * (2 * 3600 + 300)


# ---- 4: no overtaking, honest estimates ------------------------------------------------------

# "big" ranks above "small" but is slightly over its share, so it may not preempt (hysteresis);
# "tulu" ranks above both and holds the GPUs with 1-GPU jobs of unknown length.
OVER = budgets(("tulu", 4, 100), ("big", 2, 110), ("small", 1, 100))


def _busy_cluster(free_on_first=0):
    running = []
    for n in range(2):
        for g in range(8 - (free_on_first if n == 0 else 0)):
            running.append(run(f"t{n}{g}", "tulu", 1, f"c-{n:02d}", protected_until=NOW - 10))
    return running


def test_a_big_job_that_may_not_preempt_is_not_overtaken_by_worse_ranked_funded_work():
    jobs = [pend("big16", "big", 16, submit=1)]
    jobs += [pend(f"s{k}", "small", 1, submit=2 + k) for k in range(4)]
    d = schedule(snap(nodes(2), OVER, _busy_cluster(free_on_first=3), jobs))
    assert not any(s.startswith("s") for s in started(d))  # the freed GPUs are held for big16
    [hold] = d.reservations
    assert hold.job_id == "big16" and set(hold.nodes) == {"c-00", "c-01"}
    info = d.pending["big16"]
    assert info.code == "Resources" and info.estimated_start_s is None
    assert "waits for jobs of tulu to finish" in info.message


def test_unfunded_work_may_still_backfill_gpus_held_for_a_job_with_no_known_start():
    jobs = [pend("big16", "big", 16, submit=1), pend("free", "", 1, submit=2)]
    d = schedule(snap(nodes(2), OVER, _busy_cluster(free_on_first=3), jobs))
    assert "free" in started(d) and not started(d)["free"].funded


def test_an_estimate_never_assumes_a_preemption_the_rules_forbid():
    jobs = [pend("big16", "big", 16, submit=1)]
    d = schedule(snap(nodes(2), OVER, _busy_cluster(), jobs))
    assert d.pending["big16"].estimated_start_s is None  # it used to say "in 10 s"
