import datetime as dt

import pytest
from django.contrib.auth import authenticate
from django.utils import timezone

from budgets import access, demo
from budgets.balances import tree_stats
from budgets.models import AuditEntry, BudgetNode, GpuType, Role, UsageEntry

pytestmark = pytest.mark.django_db


def test_seeding_twice_leaves_one_demo_organisation():
    demo.seed()
    counts = [BudgetNode.objects.count(), Role.objects.count(), UsageEntry.objects.count()]
    demo.seed()
    assert [BudgetNode.objects.count(), Role.objects.count(), UsageEntry.objects.count()] == counts
    periods = demo.history_periods(timezone.now())  # a grant a node in each
    assert AuditEntry.objects.filter(action="set_grant").count() == counts[0] * len(periods)


def test_the_demo_organisation_is_believable():
    summary = demo.seed()
    programs = BudgetNode.objects.filter(depth=2)
    projects = BudgetNode.objects.filter(depth=3)
    assert {p.slug for p in programs} == {"nlp", "vision", "robotics"}
    assert 8 <= projects.count() <= 12
    assert Role.objects.filter(role="researcher").values("user").distinct().count() >= 30
    factors = dict(GpuType.objects.values_list("name", "cost_factor"))
    assert factors["H100"] < factors["B200"] < factors["B300"]
    assert "Budgets: 3 programs" in summary


def test_demo_grants_fit_the_clusters_and_every_child_fits_its_parent():
    demo.seed()
    stats = tree_stats()
    root = BudgetNode.objects.get(depth=1)
    assert stats[root.pk].grant_gpu_hours == demo.capacity_gpu_hours(demo.BudgetPeriod.current())
    for s in stats.values():
        children = [c for c in stats.values() if c.node.path[:-4] == s.node.path]
        assert sum(c.grant_gpu_hours for c in children) <= s.grant_gpu_hours


def test_demo_users_log_in_with_demo_and_hold_their_roles():
    demo.seed()
    users = {name: authenticate(username=name, password="demo") for name in
             ("leader", "manager", "researcher", "admin")}  # fmt: skip
    assert all(users.values())
    assert access.can_edit_grant(users["leader"], BudgetNode.objects.get(slug_path="nlp"))
    assert {n.slug_path for n in access.visible_nodes(users["manager"])} >= {"nlp", "nlp/olmo"}
    assert "vision" not in {n.slug_path for n in access.visible_nodes(users["manager"])}
    assert access.is_cluster_admin(users["admin"])
    assert [p.slug_path for p in access.user_projects(users["researcher"])] == [
        "nlp/olmo",
        "nlp/tulu",
    ]


def _seed_demo_at(when, tmp_path, monkeypatch, settings):
    """``manage.py seed_demo`` (budgets, clusters and their recorded history) at ``when``."""
    import time_machine
    from django.core.management import call_command

    monkeypatch.setenv("ALLOT_VAR_DIR", str(tmp_path))
    settings.DEBUG = True
    traveller = time_machine.travel(when, tick=False)
    traveller.start()
    call_command("seed_demo")
    return traveller


@pytest.mark.parametrize(
    "when",
    [
        dt.datetime(2026, 11, 20, 15, 30, tzinfo=dt.UTC),  # mid-quarter
        dt.datetime(2027, 1, 9, 8, 0, tzinfo=dt.UTC),  # early: the history reaches into Q4
    ],
)
def test_with_the_seeded_history_every_budget_burns_within_its_grant(
    when, client, tmp_path, monkeypatch, settings
):
    traveller = _seed_demo_at(when, tmp_path, monkeypatch, settings)
    try:
        now = when.replace(second=0)
        for period in demo.history_periods(now):
            stats = tree_stats(period)
            # the share of the period the history covers
            since = max(period.start_at, demo.history_start(now))
            elapsed = (min(now, period.end_at) - since) / (period.end_at - period.start_at)
            for s in stats.values():
                grant, used = float(s.grant_gpu_hours), float(s.used_gpu_hours)
                assert grant > 0, (period, s.node)
                assert 0 < used < grant, (period, s.node)  # never overspent
            root = next(s for s in stats.values() if s.node.depth == 1)
            pace = float(root.used_gpu_hours) / (float(root.grant_gpu_hours) * elapsed)
            assert 0.4 <= pace <= 1.0  # the organisation spends below an even pace
        client.force_login(authenticate(username="leader", password="demo"))
        page = client.get("/budgets/")
        assert page.status_code == 200
        assert "nlp/olmo" in page.content.decode() or "OLMo" in page.content.decode()
        root = BudgetNode.objects.get(depth=1)
        burn = client.get(f"/budgets/{root.pk}/burndown.json").json()
        used = [float(p["used_gpu_hours"]) for p in burn["points"]]
        assert used == sorted(used) and used[-1] > 0
        assert float(burn["points"][-1]["remaining_gpu_hours"]) > 0
        assert client.get(f"/budgets/{root.pk}/").status_code == 200
    finally:
        traveller.stop()
