import random

from scheduling.engine import schedule
from scheduling.engine.model import BudgetNode, Policy
from scheduling.engine.tree import FairTree

from .helpers import budgets, nodes, pend, snap, started


def order(tree, paths):
    return sorted(paths, key=tree.rank)


def test_siblings_rank_by_share_over_usage():
    tree = FairTree.build(budgets(("a", 1, 100), ("b", 1, 10), ("c", 2, 100)))
    # a: S=.25 U=.476 -> .52; b: S=.25 U=.048 -> 5.25; c: S=.5 U=.476 -> 1.05
    assert order(tree, ["a", "b", "c"]) == ["b", "c", "a"]


def test_a_better_subtree_comes_entirely_before_a_worse_one():
    tree = FairTree.build(
        budgets(("x", 1, 0), ("x/heavy", 1, 1000), ("y", 1, 10), ("y/idle", 1, 0))
    )
    # x used the most in total (through x/heavy), so all of y ranks first, even y's busy
    # neighbours; within x, the heavy child still comes in x's block.
    assert tree.rank("y") < tree.rank("y/idle") < tree.rank("x") < tree.rank("x/heavy")


def test_ties_break_by_larger_share_then_by_path():
    tree = FairTree.build(budgets(("b", 1), ("a", 1), ("c", 3)))
    assert order(tree, ["a", "b", "c"]) == ["c", "a", "b"]
    again = FairTree.build(tuple(reversed(budgets(("b", 1), ("a", 1), ("c", 3)))))
    assert [again.rank(p) for p in "abc"] == [tree.rank(p) for p in "abc"]


def test_missing_parents_are_implied():
    tree = FairTree.build((BudgetNode("nlp/olmo", 1.0),))
    assert tree.rank("nlp") < tree.rank("nlp/olmo")


def test_strictly_below_compares_at_the_first_differing_level():
    tree = FairTree.build(budgets(("p", 1, 10), ("p/a", 1, 0), ("q", 1, 100), ("q/b", 1, 0)))
    assert tree.strictly_below("q/b", "p/a")
    assert not tree.strictly_below("p/a", "q/b")
    assert tree.strictly_below("", "p/a")  # no project ranks below every project


def test_equal_standing_is_not_strictly_below_even_when_the_name_breaks_the_tie():
    tree = FairTree.build(budgets(("a", 1, 5), ("b", 1, 5)))
    assert not tree.strictly_below("b", "a") and not tree.strictly_below("a", "b")


def test_budget_share_is_the_product_of_normalised_shares():
    tree = FairTree.build(
        budgets(("nlp", 10000), ("nlp/olmo", 6000), ("nlp/tulu", 4000), ("robotics", 5000))
    )
    assert abs(tree.budget_share("nlp/olmo") - 0.4) < 1e-9


def one_slot_winner(pending, policy=None, user_usage=None, tree=None):
    d = schedule(
        snap(
            nodes(1, gpus=1),
            tree or budgets(("a", 1, 100), ("b", 1, 0)),
            pending=pending,
            policy=policy,
            user_usage_gpu_s=user_usage or {},
        )
    )
    return list(started(d))


def test_the_better_ranked_project_gets_the_only_free_gpu():
    assert one_slot_winner([pend("ja", "a", 1, submit=0), pend("jb", "b", 1, submit=50)]) == ["jb"]


def test_fairshare_ignores_the_priority_label():
    jobs = [pend("ja", "a", 1, priority="urgent"), pend("jb", "b", 1, priority="low")]
    assert one_slot_winner(jobs) == ["jb"]
    assert one_slot_winner(jobs, Policy(name="priority")) == ["ja"]


def test_fifo_serves_the_earliest_submission():
    jobs = [pend("ja", "a", 1, submit=1), pend("jb", "b", 1, submit=2)]
    assert one_slot_winner(jobs, Policy(name="fifo")) == ["ja"]


def test_within_a_project_the_least_used_user_goes_first_then_submit_time():
    tree = budgets(("a", 1))
    jobs = [pend("heavy", "a", 1, user="h", submit=0), pend("light", "a", 1, user="l", submit=9)]
    usage = {("a", "h"): 500.0, ("a", "l"): 1.0}
    assert one_slot_winner(jobs, user_usage=usage, tree=tree) == ["light"]
    same = [pend("late", "a", 1, submit=9), pend("early", "a", 1, submit=1)]
    assert one_slot_winner(same, tree=tree) == ["early"]


def test_trees_with_the_same_sides_of_one_share_the_rank_test_and_answer_alike():
    """``strictly_below`` depends only on which nodes are over or under their share, so
    trees that agree on that share its memo (``tree._shared_memo``); each tree's answers
    equal those computed afresh from its own LFS values."""
    rng = random.Random(5)
    paths = ["a", "a/x", "a/y", "b", "b/x", "b/y", "b/y/z", "c"]
    for _ in range(200):
        budgets = [
            BudgetNode(p, rng.choice([1, 2, 3]), rng.choice([0.0, 1.0, 5.0, rng.uniform(0, 9)]))
            for p in paths
        ]
        tree = FairTree.build(budgets)
        for v in paths + ["", "unknown"]:
            for p in paths + ["", "unknown"]:
                assert tree.strictly_below(v, p) == tree._strictly_below(v, p)
