from scheduling.engine import schedule
from scheduling.engine.model import Policy

from .helpers import budgets, nodes, pend, preempted, run, snap, started

NOW = 100_000.0


def test_a_job_is_funded_when_the_balance_covers_its_protected_window():
    tree = budgets(("a", 1, 0, 2 * 3600 * 4), ("b", 1, 0, 2 * 3600 * 4 - 1))
    d = schedule(
        snap(
            nodes(2),
            tree,
            pending=[pend("ja", "a", 4, min_runtime=7200), pend("jb", "b", 4, min_runtime=7200)],
        )
    )
    assert started(d)["ja"].funded is True
    assert started(d)["jb"].funded is False


def test_the_lien_is_held_within_a_pass_so_one_balance_cannot_fund_two_jobs():
    tree = budgets(("a", 1, 0, 3600 * 8))
    jobs = [
        pend("j1", "a", 8, min_runtime=3600, submit=1),
        pend("j2", "a", 8, min_runtime=3600, submit=2),
    ]
    d = schedule(snap(nodes(2), tree, pending=jobs))
    assert started(d)["j1"].funded and not started(d)["j2"].funded


def test_the_gpu_cost_factor_scales_the_lien():
    tree = budgets(("a", 1, 0, 3600 * 8 * 1.5))
    d = schedule(
        snap(nodes(1, gpu_type="B200"), tree, pending=[pend("j", "a", 8)], gpu_cost={"B200": 2.0})
    )
    assert started(d)["j"].funded is False


def test_unfunded_work_only_takes_gpus_no_funded_job_can_use():
    tree = budgets(("a", 1, 0), ("b", 1, 0, 0.0))  # b's budget is spent
    jobs = [pend("free", "b", 8, submit=0), pend("paid", "a", 8, submit=5)]
    d = schedule(snap(nodes(1), tree, pending=jobs))
    assert list(started(d)) == ["paid"]
    assert d.pending["free"].code == "Unfunded"


def test_unfunded_work_is_preempted_at_once_by_funded_work():
    tree = budgets(("a", 1, 0))
    running = [run("idle", "", 8, "c-00", protected_until=NOW + 9999, funded=False)]
    d = schedule(snap(nodes(1), tree, running, [pend("paid", "a", 8)]))
    assert "idle" in preempted(d) and started(d)["paid"].funded


def test_protection_is_capped_at_eight_hours_unless_an_exception_raises_it():
    tree = budgets(("a", 1))
    jobs = [
        pend("long", "a", 1, min_runtime=20 * 3600, submit=1),
        pend("excepted", "a", 1, min_runtime=20 * 3600, submit=2, max_protection_s=12 * 3600),
    ]
    s = started(schedule(snap(nodes(1), tree, pending=jobs)))
    assert s["long"].protected_until_s == NOW + 8 * 3600
    assert s["excepted"].protected_until_s == NOW + 12 * 3600


def test_protection_counts_from_each_start():
    tree = budgets(("a", 1))
    # A resumed job (submitted long ago) is protected again from this start.
    s = started(schedule(snap(nodes(1), tree, pending=[pend("again", "a", 1, submit=0.0)])))
    assert s["again"].protected_until_s == NOW + 3600


def test_the_cap_follows_the_policy_setting():
    tree = budgets(("a", 1))
    policy = Policy(max_min_runtime_s=1800)
    s = started(schedule(snap(nodes(1), tree, pending=[pend("j", "a", 1)], policy=policy)))
    assert s["j"].protected_until_s == NOW + 1800
