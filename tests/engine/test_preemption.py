from scheduling.engine import schedule

from .helpers import budgets, nodes, pend, preempted, run, snap, started

NOW = 100_000.0
# "hi" is under its share (never used), "lo" is over it.
TREE = budgets(("hi", 1, 0), ("lo", 1, 1000))


def test_a_waiting_funded_job_preempts_lower_ranked_work_past_protection():
    running = [run("old", "lo", 8, "c-00", protected_until=NOW - 1)]
    d = schedule(snap(nodes(1), TREE, running, [pend("new", "hi", 8)]))
    assert preempted(d)["old"].by_job_id == "new"
    assert "ranks above" in preempted(d)["old"].reason
    assert started(d)["new"].nodes == (("c-00", 8),)


def test_a_protected_job_is_never_preempted():
    running = [run("old", "lo", 8, "c-00", protected_until=NOW + 1)]
    d = schedule(snap(nodes(1), TREE, running, [pend("new", "hi", 8)]))
    assert not d.preemptions and not d.starts
    assert d.pending["new"].code == "Resources"


def test_a_job_does_not_preempt_a_better_ranked_project():
    running = [run("old", "hi", 8, "c-00", protected_until=NOW - 1)]
    d = schedule(
        snap(nodes(1), budgets(("hi", 1, 0), ("lo", 1, 1000)), running, [pend("new", "lo", 8)])
    )
    assert not d.preemptions


def test_unfunded_victims_go_before_funded_ones():
    running = [
        run("funded", "lo", 4, "c-00", protected_until=NOW - 1),
        run("free", "", 4, "c-01", funded=False),
    ]
    d = schedule(snap(nodes(2, gpus=4), TREE, running, [pend("new", "hi", 4)]))
    assert list(preempted(d)) == ["free"]


def test_the_smallest_victim_set_is_chosen():
    running = [
        run("s1", "lo", 1, "c-00", protected_until=NOW - 1),
        run("s2", "lo", 1, "c-00", protected_until=NOW - 1),
        run("s3", "lo", 2, "c-00", protected_until=NOW - 1),
        run("s4", "lo", 4, "c-00", protected_until=NOW - 1),
        run("big", "lo", 4, "c-01", protected_until=NOW - 1),
        run("p", "lo", 4, "c-01", protected_until=NOW + 99),
    ]
    d = schedule(snap(nodes(2), TREE, running, [pend("new", "hi", 4)]))
    assert set(preempted(d)) in ({"s4"}, {"big"})


def test_multi_node_jobs_preempt_whole_nodes():
    running = [run(f"r{i}", "lo", 8, f"c-{i:02d}", protected_until=NOW - 1) for i in range(3)]
    d = schedule(snap(nodes(3), TREE, running, [pend("wide", "hi", 16)]))
    node_of = {r.id: r.nodes[0][0] for r in running}
    assert len(d.preemptions) == 2
    assert {n for n, _ in started(d)["wide"].nodes} == {node_of[p.job_id] for p in d.preemptions}
    assert [g for _, g in started(d)["wide"].nodes] == [8, 8]


def test_equal_standing_does_not_license_preemption():
    tree = budgets(("a", 1, 10), ("b", 1, 10))
    running = [run("old", "b", 8, "c-00", protected_until=NOW - 1)]
    d = schedule(snap(nodes(1), tree, running, [pend("new", "a", 8)]))
    assert not d.preemptions


def test_a_multi_node_victim_counts_once_when_node_sets_are_compared():
    # c-00 and c-01 each hold one unfunded job; c-02 and c-03 hold ONE unfunded two-node job.
    # Counted per node, both pairs cost two victims and names pick c-00 + c-01; counted once,
    # c-02 + c-03 cost a single victim.
    running = [
        run("a", "lo", 8, "c-00", funded=False),
        run("b", "lo", 8, "c-01", funded=False),
        run("wide", "lo", 16, None, funded=False, placement=(("c-02", 8), ("c-03", 8))),
    ]
    d = schedule(snap(nodes(4), TREE, running, [pend("new", "hi", 16)]))
    assert set(preempted(d)) == {"wide"}
    assert {n for n, _ in started(d)["new"].nodes} == {"c-02", "c-03"}


def test_a_shared_victim_does_not_make_a_dearer_group_win():
    # The two-node job is funded (past protection); c-00 and c-01 hold unfunded jobs, which
    # go first whatever the count: one funded victim costs more than two unfunded ones.
    running = [
        run("a", "lo", 8, "c-00", funded=False),
        run("b", "lo", 8, "c-01", funded=False),
        run("wide", "lo", 16, None, protected_until=NOW - 1, placement=(("c-02", 8), ("c-03", 8))),
    ]
    d = schedule(snap(nodes(4), TREE, running, [pend("new", "hi", 16)]))
    assert set(preempted(d)) == {"a", "b"}
