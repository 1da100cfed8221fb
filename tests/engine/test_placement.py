from scheduling.engine import schedule

from .helpers import budgets, nodes, pend, run, snap, started

TREE = budgets(("a", 1))


def test_a_small_job_goes_to_the_fullest_node_it_fits_on():
    running = [
        run("r0", "a", 2, "c-00", protected_until=1e9),
        run("r1", "a", 6, "c-01", protected_until=1e9),
    ]
    d = schedule(snap(nodes(3), TREE, running, [pend("j", "a", 2)]))
    assert started(d)["j"].nodes == (("c-01", 2),)


def test_a_job_that_fits_one_node_is_never_split():
    running = [run(f"r{i}", "a", 5, f"c-{i:02d}", protected_until=1e9) for i in range(3)]
    d = schedule(snap(nodes(3), TREE, running, [pend("j", "a", 4)]))
    assert not d.starts and d.pending["j"].code == "Resources"


def test_a_multi_node_job_gets_whole_free_nodes():
    running = [run("r", "a", 1, "c-00", protected_until=1e9)]
    d = schedule(snap(nodes(4), TREE, running, [pend("wide", "a", 20)]))
    placement = started(d)["wide"].nodes
    assert [g for _, g in placement] == [8, 8, 4]
    assert "c-00" not in {n for n, _ in placement}


def test_cluster_and_gpu_type_constraints_are_honoured():
    all_nodes = nodes(1, cluster="x") + nodes(1, cluster="y", gpu_type="B200")
    jobs = [
        pend("on-y", "a", 1, cluster="y", submit=1),
        pend("b200", "a", 1, gpu_type="B200", submit=2),
    ]
    d = schedule(snap(all_nodes, TREE, pending=jobs, gpu_cost={"H100": 1, "B200": 2}))
    assert started(d)["on-y"].nodes[0][0] == "y-00"
    assert started(d)["b200"].nodes[0][0] == "y-00"


def test_small_jobs_keep_whole_nodes_free_for_large_ones():
    jobs = [pend(f"s{i}", "a", 1, submit=i) for i in range(8)] + [pend("big", "a", 8, submit=99)]
    d = schedule(snap(nodes(2), TREE, pending=jobs))
    assert len(d.starts) == 9
    assert {n for s in d.starts if s.job_id != "big" for n, _ in s.nodes} == {"c-00"}
