import math

from scheduling.engine import schedule

from .helpers import budgets, nodes, pend, run, snap

NOW = 100_000.0
TREE = budgets(("nlp", 2, 0), ("nlp/olmo", 3, 100), ("nlp/tulu", 1, 0), ("robotics", 1, 500))


def test_every_waiting_job_gets_a_stable_code_and_a_sentence():
    running = [run("r", "robotics", 8, "c-00", protected_until=NOW + 3600)]
    jobs = [
        pend("held", "nlp/olmo", 1, held=True),
        pend("huge", "nlp/olmo", 64),
        pend("first", "nlp/olmo", 8, submit=1),
        pend("second", "nlp/olmo", 8, submit=2),
        pend("nofund", "", 1),
    ]
    d = schedule(snap(nodes(1), TREE, running, jobs))
    codes = {j: i.code for j, i in d.pending.items()}
    assert codes == {
        "held": "Held",
        "huge": "ExceedsCapacity",
        "first": "Resources",
        "second": "Priority",
        "nofund": "Unfunded",
    }
    assert all(i.message.endswith(".") for i in d.pending.values())


def test_queue_positions_and_estimated_starts_follow_the_queue():
    running = [run("r", "robotics", 8, "c-00", protected_until=NOW + 3600)]
    jobs = [pend(f"j{i}", "nlp/olmo", 8, submit=i, min_runtime=1800) for i in range(3)]
    d = schedule(snap(nodes(1), TREE, running, jobs))
    assert [d.pending[f"j{i}"].position for i in range(3)] == [1, 2, 3]
    starts = [d.pending[f"j{i}"].estimated_start_s for i in range(3)]
    # j0 may preempt robotics when its protection ends; j1 and j2 need j0's GPUs, and j0's
    # protection end is no end they can count on (it ranks with them: they may not preempt
    # it). They used to be promised 1800 s and 3600 s later, which assumed exactly that.
    assert starts == [NOW + 3600, None, None]
    assert "waits for jobs of nlp/olmo to finish" in d.pending["j1"].message


def test_an_estimate_counts_on_work_it_may_preempt():
    running = [run("r", "robotics", 8, "c-00", protected_until=NOW + 3600)]
    jobs = [pend("j0", "nlp/olmo", 4, min_runtime=1800), pend("j1", "nlp/olmo", 4, submit=1)]
    d = schedule(snap(nodes(1), TREE, running, jobs))
    assert [d.pending[f"j{i}"].estimated_start_s for i in range(2)] == [NOW + 3600] * 2


def test_a_hold_counts_on_a_run_the_budget_floor_defunds_and_on_no_funded_run_above_it():
    # p0 (b/y) needs both 4-GPU nodes. On c-00: a's run, which ranks below b/y (protected for
    # 600 s more), and b/x's 1-GPU run, past its protection; b/x does not rank below b/y.
    tree = budgets(("a", 1, 100), ("b", 1, 0), ("b/x", 1, 0, 0.0), ("b/y", 1, 0))
    running = [
        run("x", "b/x", 1, "c-00", protected_until=NOW - 100),
        run("a", "a", 3, "c-00", protected_until=NOW + 600),
    ]
    jobs = [pend("p0", "b/y", 8, min_runtime=0)]
    d = schedule(snap(nodes(2, gpus=4), tree, running, jobs))
    # b/x has nothing left: this pass defunds x, so anyone may preempt it and p0 counts on it.
    assert [f.job_id for f in d.defunded] == ["x"]
    assert d.reservations[0].start_s == NOW + 600
    assert d.pending["p0"].estimated_start_s == NOW + 600
    # Funded, x need not yield to p0: the hold has no known time, and p0 no estimate.
    funded = budgets(("a", 1, 100), ("b", 1, 0), ("b/x", 1, 0), ("b/y", 1, 0))
    d = schedule(snap(nodes(2, gpus=4), funded, running, jobs))
    assert d.defunded == () and d.reservations[0].start_s == math.inf
    assert d.pending["p0"].estimated_start_s is None
    assert "waits for jobs of b/x to finish" in d.pending["p0"].message


def test_positions_count_per_cluster():
    all_nodes = nodes(1, cluster="x") + nodes(1, cluster="y")
    running = [
        run("rx", "robotics", 8, "x-00", protected_until=NOW + 1),
        run("ry", "robotics", 8, "y-00", protected_until=NOW + 1),
    ]
    jobs = [
        pend("a", "nlp/olmo", 8, cluster="x", submit=1),
        pend("b", "nlp/olmo", 8, cluster="y", submit=2),
    ]
    d = schedule(snap(all_nodes, TREE, running, jobs))
    assert d.pending["a"].position == 1 and d.pending["b"].position == 1


def test_a_running_job_is_explained():
    running = [run("r", "nlp/olmo", 4, "c-00", protected_until=NOW + 60)]
    d = schedule(snap(nodes(1), TREE, running, gpu_cost={"H100": 1.5}))
    e = d.explanations["r"]
    assert e.funded and e.funding_chain == ("nlp", "nlp/olmo")
    assert e.gpu_hours_per_hour == 6.0
    assert e.protected_until_s == NOW + 60 and e.protection_source == "contract"
    nlp, olmo = e.standing
    assert nlp.path == "nlp" and math.isclose(nlp.share, 2 / 3)
    assert math.isclose(nlp.usage_share, 100 / 600)
    assert olmo.path == "nlp/olmo" and math.isclose(olmo.share, 0.75) and olmo.usage_share == 1.0
    assert e.preemptible_by.startswith("Nothing until its protection ends")
    assert "robotics" not in e.preemptible_by  # robotics is over its share: it ranks below


def test_an_unfunded_job_is_explained_as_preemptible_any_time():
    d = schedule(snap(nodes(1), TREE, [run("u", "", 1, "c-00", funded=False)]))
    e = d.explanations["u"]
    assert not e.funded and e.funding_chain == () and "any time" in e.preemptible_by
