import pytest
from django.contrib.auth import authenticate

from budgets import access, demo
from budgets.balances import tree_stats
from budgets.models import AuditEntry, BudgetNode, GpuType, Role, UsageEntry

pytestmark = pytest.mark.django_db


def test_seeding_twice_leaves_one_demo_organisation():
    demo.seed()
    counts = [BudgetNode.objects.count(), Role.objects.count(), UsageEntry.objects.count()]
    demo.seed()
    assert [BudgetNode.objects.count(), Role.objects.count(), UsageEntry.objects.count()] == counts
    assert AuditEntry.objects.filter(action="set_grant").count() == counts[0]


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
