from scheduling.engine import schedule
from scheduling.engine.model import Policy, Reservation

from .helpers import budgets, nodes, pend, preempted, run, snap, started

NOW = 100_000.0
TREE = budgets(("hi", 1, 0), ("lo", 1, 1000))


def protected_smalls(n_nodes, until):
    return [
        run(f"r{i}", "lo", 8, f"c-{i:02d}", protected_until=until + i * 100) for i in range(n_nodes)
    ]


def test_a_blocked_large_job_reserves_the_nodes_that_free_up_soonest():
    running = protected_smalls(3, NOW + 3600)
    d = schedule(snap(nodes(3), TREE, running, [pend("big", "hi", 16)]))
    (held,) = d.reservations
    assert held.job_id == "big"
    assert held.nodes == ("c-00", "c-01") and held.start_s == NOW + 3700
    assert d.pending["big"].code == "Resources"
    assert d.pending["big"].estimated_start_s == NOW + 3700


def test_reserved_nodes_are_backfilled_only_with_work_that_yields_in_time():
    running = [run("r0", "lo", 2, "c-00", protected_until=NOW + 3600)]
    jobs = [
        pend("big", "hi", 8, submit=0),
        pend("short", "lo", 2, submit=1, min_runtime=1800),
        pend("long", "lo", 4, submit=2, min_runtime=7200),
    ]
    d = schedule(snap(nodes(1), TREE, running, jobs))
    assert "short" in started(d)
    assert "long" not in started(d)
    assert d.pending["long"].code == "Reservation"


def test_an_approved_reservation_holds_nodes_for_its_project():
    res = Reservation("r1", "c", 8, NOW + 600, NOW + 7200, project="hi")
    jobs = [pend("other", "lo", 8, submit=0, min_runtime=3600), pend("mine", "hi", 8, submit=1)]
    d = schedule(snap(nodes(1), TREE, pending=jobs, reservations=(res,)))
    assert list(started(d)) == ["mine"]


def test_a_drained_node_takes_nothing_new():
    d = schedule(
        snap(
            nodes(2, drained={0}),
            TREE,
            pending=[pend("j", "hi", 8, submit=0), pend("k", "hi", 8, submit=1)],
        )
    )
    assert started(d)["j"].nodes == (("c-01", 8),)
    assert "k" not in started(d)


def test_a_job_that_only_fits_drained_nodes_waits_for_drain():
    d = schedule(snap(nodes(2, drained={0}), TREE, pending=[pend("wide", "hi", 16)]))
    assert d.pending["wide"].code == "Drain"


def test_draining_preempts_jobs_as_their_protection_ends_and_reports_when_empty():
    running = [
        run("done", "hi", 4, "c-00", protected_until=NOW - 1),
        run("busy", "hi", 4, "c-00", protected_until=NOW + 500),
    ]
    d = schedule(snap(nodes(1, drained={0}), TREE, running))
    assert list(preempted(d)) == ["done"]
    assert "draining" in preempted(d)["done"].reason
    assert d.drains == {"c-00": NOW + 500}
    assert "draining" in d.explanations["busy"].preemptible_by


LANE = Policy(interactive_pool_gpus={"c": 2}, interactive_per_user=1)


def test_an_interactive_session_starts_at_once_displacing_unprotected_batch_work():
    running = [run("batch", "hi", 8, "c-00", protected_until=NOW - 1)]
    d = schedule(
        snap(nodes(1), TREE, running, [pend("dbg", "lo", 1, kind="interactive")], policy=LANE)
    )
    assert "dbg" in started(d) and "batch" in preempted(d)


def test_interactive_sessions_are_limited_per_user_and_by_the_pool():
    jobs = [
        pend("s1", "hi", 1, kind="interactive", user="ana", submit=1),
        pend("s2", "hi", 1, kind="interactive", user="ana", submit=2),
        pend("s3", "hi", 1, kind="interactive", user="ben", submit=3),
        pend("s4", "hi", 1, kind="interactive", user="cat", submit=4),
    ]
    d = schedule(snap(nodes(1), TREE, pending=jobs, policy=LANE))
    assert set(started(d)) == {"s1", "s3"}
    assert d.pending["s2"].code == "InteractiveLimit"
    assert d.pending["s4"].code == "InteractiveLimit"


def test_interactive_protection_is_short():
    job = pend("dbg", "hi", 1, kind="interactive", min_runtime=8 * 3600)
    d = schedule(snap(nodes(1), TREE, pending=[job], policy=LANE))
    assert started(d)["dbg"].protected_until_s == NOW + 2 * 3600


def _reserved_for_lo(start_s, protected_until):
    """c-01 is reserved for "lo" (it ranks below "hi"); an 8-GPU job of "hi" sits on it."""
    res = Reservation("r1", "c", 8, start_s, NOW + 7200, project="lo")
    running = [
        run("mine", "hi", 8, "c-00", protected_until=NOW + 3600),
        run("guest", "hi", 8, "c-01", protected_until=protected_until),
    ]
    # Better-ranked jobs wait first: their failed searches would end the pass early, before
    # "due" is reached, were it not for the reserved node "due" may still claim.
    jobs = [pend(f"hi{k}", "hi", 1 + 7 * (k > 0), submit=k) for k in range(3)]
    jobs.append(pend("due", "lo", 8, submit=9))
    return snap(nodes(2), TREE, running, jobs, reservations=(res,))


def test_once_a_reservation_opens_its_project_preempts_unprotected_strangers_on_its_nodes():
    d = schedule(_reserved_for_lo(NOW - 60, NOW - 1))
    assert set(preempted(d)) == {"guest"}
    assert started(d)["due"].nodes == (("c-01", 8),)
    assert "approved reservation" in preempted(d)["guest"].reason
    assert preempted(d)["guest"].by_job_id == "due"
    assert all(f"hi{k}" not in started(d) for k in range(3))  # the better rank gives no right


def test_protected_work_on_opened_reserved_nodes_is_never_preempted():
    d = schedule(_reserved_for_lo(NOW - 60, NOW + 600))
    assert d.preemptions == () and "due" not in started(d)


def test_before_its_window_opens_a_reservation_gives_no_right_to_preempt():
    d = schedule(_reserved_for_lo(NOW + 600, NOW - 1))
    assert d.preemptions == () and "due" not in started(d)
