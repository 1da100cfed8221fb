import datetime as dt
from decimal import Decimal

import pytest
import time_machine
from django.utils import timezone

from budgets import services
from budgets.balances import balances, tree_stats, windowed_usage, windowed_user_usage
from budgets.models import AuditEntry, BudgetNode, Grant, UsageEntry
from budgets.periods import BudgetPeriod
from tests.budgets.factories import GpuTypeFactory, UsageEntryFactory

pytestmark = pytest.mark.django_db


def test_setting_a_grant_records_who_changed_what_and_why(budget_tree, leader):
    services.set_grant(leader, budget_tree.tulu, 2_500, reason="new eval suite")
    entry = AuditEntry.objects.filter(node=budget_tree.tulu).first()
    assert (entry.actor, entry.action, entry.field) == (leader, "set_grant", "grant_gpu_hours")
    assert (entry.old, entry.new, entry.reason) == ("2000.00", "2500.00", "new eval suite")


def test_a_grant_stands_into_the_next_period_until_changed(budget_tree):
    next_period = BudgetPeriod.current().end
    with time_machine.travel(dt.datetime.combine(next_period, dt.time(12), dt.UTC)):
        assert balances([budget_tree.olmo])[budget_tree.olmo.pk].grant_gpu_hours == 3_000
        services.set_grant(None, budget_tree.olmo, 1_000)
    assert balances([budget_tree.olmo])[budget_tree.olmo.pk].grant_gpu_hours == 3_000
    assert Grant.objects.filter(node=budget_tree.olmo).count() == 2


def test_quarters_and_months_have_the_right_bounds(settings):
    assert BudgetPeriod.containing(dt.date(2026, 11, 29)).start == dt.date(2026, 10, 1)
    assert BudgetPeriod.containing(dt.date(2026, 11, 29)).end == dt.date(2027, 1, 1)
    settings.ALLOT_BUDGET_PERIOD = "month"
    period = BudgetPeriod.containing(dt.date(2026, 12, 31))
    assert (period.start, period.end, period.label) == (
        dt.date(2026, 12, 1),
        dt.date(2027, 1, 1),
        "December 2026",
    )


def test_transfer_moves_hours_between_siblings_in_one_action(budget_tree, leader):
    services.transfer_gpu_hours(leader, budget_tree.olmo, budget_tree.tulu, 500, reason="rebalance")
    got = balances([budget_tree.olmo, budget_tree.tulu])
    assert got[budget_tree.olmo.pk].grant_gpu_hours == 2_500
    assert got[budget_tree.tulu.pk].grant_gpu_hours == 2_500
    entries = AuditEntry.objects.filter(action="transfer")
    assert {e.node_id for e in entries} == {budget_tree.olmo.pk, budget_tree.tulu.pk}
    assert all("rebalance" in e.reason for e in entries)


def test_shares_follow_grants_unless_a_weight_overrides_them(budget_tree):
    stats = tree_stats()
    assert stats[budget_tree.olmo.pk].share == pytest.approx(0.6)
    assert stats[budget_tree.nlp.pk].share == pytest.approx(2 / 3)
    assert stats[budget_tree.olmo.pk].share_of_whole == pytest.approx(0.4)
    services.set_weight(None, budget_tree.tulu, 3_000)
    assert tree_stats()[budget_tree.olmo.pk].share == pytest.approx(0.5)


def test_used_rolls_up_to_ancestors_and_remaining_subtracts_liens(budget_tree):
    h100 = GpuTypeFactory(name="H100", cost_factor="1.0")
    UsageEntryFactory(node=budget_tree.olmo, gpu_type=h100, cost_gpu_seconds=3600 * 100)
    UsageEntryFactory(node=budget_tree.tulu, gpu_type=h100, cost_gpu_seconds=3600 * 50)
    services.hold_lien(budget_tree.olmo, job_ref=900, cost_gpu_seconds=3600 * 10)
    stats = tree_stats()
    assert stats[budget_tree.olmo.pk].used_gpu_hours == 100
    assert stats[budget_tree.olmo.pk].remaining_gpu_hours == 3_000 - 100 - 10
    assert stats[budget_tree.nlp.pk].used_gpu_hours == 150
    assert stats[budget_tree.root.pk].used_gpu_hours == 150
    assert stats[budget_tree.vision.pk].used_gpu_hours == 0


def test_usage_before_the_period_does_not_count_against_it(budget_tree):
    long_ago = timezone.make_aware(
        dt.datetime.combine(BudgetPeriod.current().start, dt.time()) - dt.timedelta(days=3)
    )
    UsageEntryFactory(node=budget_tree.olmo, interval_start=long_ago, cost_gpu_seconds=36_000)
    assert tree_stats()[budget_tree.olmo.pk].used_gpu_hours == 0


def test_charging_the_same_interval_twice_records_it_once(budget_tree, researcher):
    b200 = GpuTypeFactory(name="B200", cost_factor="1.8")
    start = timezone.now() - dt.timedelta(minutes=10)
    end = start + dt.timedelta(minutes=5)
    first, created = services.charge_usage(budget_tree.olmo, 7, researcher, b200, start, end, 2400)
    again, created_again = services.charge_usage(
        budget_tree.olmo, 7, researcher, "B200", start, end, 2400
    )
    assert (created, created_again) == (True, False)
    assert first.pk == again.pk
    assert UsageEntry.objects.get().cost_gpu_seconds == 4320


def test_charging_a_job_shrinks_its_lien_so_nothing_counts_twice(budget_tree):
    h100 = GpuTypeFactory()
    services.hold_lien(budget_tree.olmo, job_ref=11, cost_gpu_seconds=36_000)
    start = timezone.now() - dt.timedelta(hours=1)
    services.charge_usage(budget_tree.olmo, 11, None, h100, start, timezone.now(), 7_200)
    stats = balances([budget_tree.olmo])[budget_tree.olmo.pk]
    assert stats.used_gpu_hours == 2
    assert stats.held_gpu_hours == 8
    assert services.release_lien(11) is True
    assert services.release_lien(11) is False
    assert balances([budget_tree.olmo])[budget_tree.olmo.pk].held_gpu_hours == 0


def test_a_lien_beyond_the_remaining_balance_is_refused(budget_tree):
    with pytest.raises(services.InsufficientFunds) as raised:
        services.hold_lien(budget_tree.tulu, job_ref=5, cost_gpu_seconds=3600 * 2_001)
    assert raised.value.field == "cost_gpu_seconds"
    services.hold_lien(budget_tree.tulu, job_ref=5, cost_gpu_seconds=3600 * 2_000)
    again = services.hold_lien(budget_tree.tulu, job_ref=5, cost_gpu_seconds=3600 * 2_000)
    assert again.cost_gpu_seconds == 3600 * 2_000


def test_windowed_usage_counts_only_the_last_days_per_node_and_per_user(budget_tree, researcher):
    now = timezone.now()
    UsageEntryFactory(
        node=budget_tree.olmo, user=researcher, interval_start=now - dt.timedelta(days=2)
    )
    UsageEntryFactory(
        node=budget_tree.olmo, user=researcher, interval_start=now - dt.timedelta(days=9)
    )
    usage = windowed_usage(now=now, days=7)
    assert usage[budget_tree.olmo.pk] == 3600
    assert usage[budget_tree.nlp.pk] == 3600
    assert budget_tree.vision.pk not in usage
    assert windowed_user_usage(now=now, days=7) == {(budget_tree.olmo.pk, researcher.pk): 3600}


def test_create_rename_and_move_keep_slug_paths_in_step(budget_tree, leader):
    evals = services.create_node(leader, budget_tree.olmo, "Evaluations")
    assert evals.slug_path == "nlp/olmo/evaluations"
    services.rename_node(leader, budget_tree.nlp, "Language", slug="lang")
    evals.refresh_from_db()
    assert evals.slug_path == "lang/olmo/evaluations"
    services.move_node(leader, evals, budget_tree.vision)
    evals.refresh_from_db()
    assert evals.slug_path == "vision/evaluations"
    assert evals.path[:-4] == budget_tree.vision.path
    actions = list(AuditEntry.objects.filter(node=evals).values_list("action", flat=True))
    assert actions == ["move", "create"]


def test_archiving_hides_a_node_once_its_grant_is_returned(budget_tree, leader):
    with pytest.raises(services.BudgetValidationError):
        services.archive_node(leader, budget_tree.segmentation)
    services.set_grant(leader, budget_tree.segmentation, 0)
    services.archive_node(leader, budget_tree.segmentation, reason="done")
    assert BudgetNode.objects.get(pk=budget_tree.segmentation.pk).archived
    assert budget_tree.segmentation.pk not in tree_stats()


def test_grants_are_stored_as_exact_decimals(budget_tree):
    services.set_grant(None, budget_tree.tulu, "1234.5")
    assert balances([budget_tree.tulu])[budget_tree.tulu.pk].grant_gpu_hours == Decimal("1234.50")
