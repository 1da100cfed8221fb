"""A pass holds all its starts' liens at once (ledger.hold_liens): the same outcome as one
hold_lien after another, in a constant number of queries."""

import datetime as dt

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from budgets import ledger, services
from budgets.balances import balances
from budgets.models import Lien
from tests.budgets.factories import GpuTypeFactory, UsageEntryFactory

H = 3600


def test_earlier_requests_spend_the_balance_that_later_ones_see(budget_tree):
    failed = ledger.hold_liens(
        [
            (budget_tree.tulu, 1, 1_500 * H),
            (budget_tree.tulu, 2, 600 * H),  # 500 h left in tulu: refused
            (budget_tree.tulu, 3, 500 * H),  # fits what is left
            (budget_tree.olmo, 4, 100 * H),
        ]
    )
    assert failed == {2}
    assert sorted(Lien.objects.values_list("job_ref", "cost_gpu_seconds")) == [
        (1, 1_500 * H),
        (3, 500 * H),
        (4, 100 * H),
    ]
    assert balances([budget_tree.tulu])[budget_tree.tulu.pk].remaining_gpu_hours == 0


def test_an_ancestor_without_balance_refuses_its_descendants(budget_tree):
    h100 = GpuTypeFactory()
    # vision spent 2,900 of its 3,000 h through another project: segmentation's own 1,000 h
    # are not enough to fund more than what the program has left.
    UsageEntryFactory(node=budget_tree.vision, gpu_type=h100, cost_gpu_seconds=2_900 * H)
    failed = ledger.hold_liens(
        [(budget_tree.segmentation, 7, 80 * H), (budget_tree.segmentation, 8, 30 * H)]
    )
    assert failed == {8}


def test_an_open_lien_is_kept_and_a_released_one_reopened(budget_tree):
    services.hold_lien(budget_tree.olmo, job_ref=5, cost_gpu_seconds=10 * H)
    services.hold_lien(budget_tree.olmo, job_ref=6, cost_gpu_seconds=10 * H)
    services.release_lien(6, now=timezone.now() - dt.timedelta(hours=1))

    assert (
        ledger.hold_liens([(budget_tree.olmo, 5, 99 * H), (budget_tree.olmo, 6, 20 * H)]) == set()
    )

    assert Lien.objects.get(job_ref=5).cost_gpu_seconds == 10 * H  # untouched
    reopened = Lien.objects.get(job_ref=6)
    assert (reopened.cost_gpu_seconds, reopened.released_at) == (20 * H, None)


def test_holding_many_liens_costs_as_many_queries_as_holding_two(budget_tree):
    nodes = [budget_tree.olmo, budget_tree.tulu, budget_tree.segmentation]
    with CaptureQueriesContext(connection) as two:
        ledger.hold_liens([(budget_tree.olmo, 1, H), (budget_tree.tulu, 2, H)])
    with CaptureQueriesContext(connection) as many:
        ledger.hold_liens([(nodes[i % 3], 100 + i, H) for i in range(60)])
    assert len(many) == len(two)
    assert Lien.objects.count() == 62


def test_a_lien_shrinks_to_what_is_still_outstanding_but_never_below_its_charges(budget_tree):
    ledger.hold_lien(budget_tree.olmo, 9, 10 * H)
    Lien.objects.filter(job_ref=9).update(charged_gpu_seconds=4 * H)
    assert ledger.shrink_lien(9, 2 * H) == 4 * H  # held 6 h, 2 h still outstanding
    assert Lien.objects.get(job_ref=9).cost_gpu_seconds == 6 * H
    assert ledger.shrink_lien(9, 5 * H) == 0  # it holds less than that: never grows here
    assert ledger.shrink_lien(9, 0) == 2 * H
    assert Lien.objects.get(job_ref=9).cost_gpu_seconds == 4 * H  # what is charged stays
    ledger.release_lien(9)
    assert ledger.shrink_lien(9, 0) == 0  # a released lien is left alone
