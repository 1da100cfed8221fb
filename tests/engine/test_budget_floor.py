"""The budget floor is an engine rule: the live loop and the simulator get it from one place."""

from dataclasses import replace

from scheduling.engine import schedule
from scheduling.engine.model import Policy, Snapshot
from tests.engine.helpers import RICH, budgets, nodes, pend, run

NOW = 10_000.0


def snap(tree, running, pending=(), chain=True):
    return Snapshot(
        now_s=NOW,
        nodes=nodes(1),
        budgets=tree,
        running=tuple(running),
        pending=tuple(pending),
        policy=Policy(),
        chain_balances=chain,
    )


def test_a_run_past_its_protection_on_a_spent_budget_becomes_unallocated():
    tree = budgets(("nlp", 1, 0, RICH), ("nlp/olmo", 1, 0, 0.0))
    d = schedule(snap(tree, [run("r", "nlp/olmo", 8, "c-00", protected_until=NOW - 1)]))
    [out] = d.defunded
    assert (out.job_id, out.path, out.at_s) == ("r", "nlp/olmo", NOW)
    assert d.explanations["r"].funded is False


def test_a_protected_run_keeps_its_funding_its_lien_pays_for_it():
    tree = budgets(("nlp", 1, 0, RICH), ("nlp/olmo", 1, 0, 0.0))
    d = schedule(snap(tree, [run("r", "nlp/olmo", 8, "c-00", protected_until=NOW + 60)]))
    assert d.defunded == ()


def test_an_ancestor_that_ran_out_defunds_and_refuses_funding_below_it():
    tree = budgets(("nlp", 1, 0, 0.0), ("nlp/olmo", 1, 0, RICH), ("cv", 1, 0, RICH))
    running = [run("r", "nlp/olmo", 4, "c-00", protected_until=NOW - 1)]
    d = schedule(snap(tree, running, [pend("p", "nlp/olmo", 4)]))
    assert [x.path for x in d.defunded] == ["nlp"]
    assert [(s.job_id, s.funded) for s in d.starts] == [("p", False)]


def test_a_defunded_run_is_preempted_by_a_funded_job_of_any_rank():
    # olmo ranks above cv (cv used more), yet cv's waiting job may take olmo's spent run.
    tree = budgets(("nlp", 1, 0, RICH), ("nlp/olmo", 1, 0, 0.0), ("cv", 1, 5e6, RICH))
    running = [run("r", "nlp/olmo", 8, "c-00", protected_until=NOW - 1)]
    d = schedule(snap(tree, running, [pend("p", "cv", 8)]))
    assert [p.job_id for p in d.preemptions] == ["r"]
    assert [(s.job_id, s.funded) for s in d.starts] == [("p", True)]
    funded_tree = tuple(replace(b, remaining_gpu_s=RICH) for b in tree)
    d = schedule(snap(funded_tree, running, [pend("p", "cv", 8)]))
    assert d.preemptions == ()  # still funded: cv does not rank above it


def test_without_chain_balances_only_the_project_counts():
    tree = budgets(("nlp", 1, 0, 0.0), ("nlp/olmo", 1, 0, RICH))
    d = schedule(snap(tree, [], [pend("p", "nlp/olmo", 4)], chain=False))
    assert [(s.job_id, s.funded) for s in d.starts] == [("p", True)]
