import pytest
from django.core.management import call_command

from exceptions.models import ExceptionRequest
from scheduling.models import Cluster, Job


@pytest.mark.django_db
def test_the_demo_seed_builds_the_organisation_once(tmp_path, monkeypatch, settings):
    monkeypatch.setenv("ALLOT_VAR_DIR", str(tmp_path))
    call_command("seed_demo")
    clusters = {c.name: c.total_gpus() for c in Cluster.objects.all()}
    jobs = Job.objects.count()
    assert clusters == {"jupiter": 1024, "saturn": 256, "neptune": 88}
    assert jobs > 150  # an oversubscribed backlog
    assert ExceptionRequest.objects.filter(state="submitted").count() == 2
    call_command("seed_demo")
    assert Job.objects.count() == jobs
    assert ExceptionRequest.objects.count() == 2


@pytest.mark.django_db
def test_demo_traffic_tops_the_queues_up_to_keep_them_moving(tmp_path, monkeypatch):
    from scheduling.demo import keep_demand

    monkeypatch.setenv("ALLOT_VAR_DIR", str(tmp_path))
    call_command("seed_demo")
    Job.objects.filter(cluster__name="neptune").update(state="completed")
    created = keep_demand(factor=1.5, seed=3)
    active = sum(
        Job.objects.active().filter(cluster__name="neptune").values_list("gpus", flat=True)
    )
    assert created > 0
    assert active >= 88 * 1.5
    assert keep_demand(factor=1.5, seed=3) == 0  # already busy enough: nothing more


@pytest.mark.django_db
def test_seeding_again_keeps_what_people_changed_in_grants_and_structure(tmp_path, monkeypatch):
    from decimal import Decimal

    from django.contrib.auth import get_user_model

    from budgets import services
    from budgets.balances import balances, committed_gpu_hours
    from budgets.models import BudgetNode
    from budgets.periods import BudgetPeriod

    monkeypatch.setenv("ALLOT_VAR_DIR", str(tmp_path))
    call_command("seed_demo")
    leader = get_user_model().objects.get(username="leader")
    node = {n.slug_path: n for n in BudgetNode.objects.all()}
    period = BudgetPeriod.current()
    grant = {pk: b.grant_gpu_hours for pk, b in balances(list(node.values()), period).items()}

    def spent(n):  # a grant cannot be cut below what the node has spent and holds
        return sum(committed_gpu_hours(n, period), Decimal(0))

    # The leader moves all of olmo's unspent hours to tulu, as in the browser ...
    olmo, tulu = node["nlp/olmo"], node["nlp/tulu"]
    services.set_grant(leader, olmo, spent(olmo), reason="olmo paused")
    freed = grant[olmo.pk] - spent(olmo)
    services.set_grant(leader, tulu, grant[tulu.pk] + freed, reason="tulu deadline")
    # ... and reshapes the tree: a rename, a new program, a move, an archived project.
    services.rename_node(leader, node["nlp/safety"], "Alignment", slug="alignment")
    health = services.create_node(leader, BudgetNode.objects.get(depth=1), "Health", "health")
    locomotion = node["robotics/locomotion"]
    services.set_grant(leader, locomotion, spent(locomotion), reason="wound down")
    clip = node["vision/clip-scaling"]
    services.set_grant(leader, clip, spent(clip), reason="to robotics")
    services.move_node(leader, node["vision/clip-scaling"], node["robotics"])
    services.archive_node(leader, node["robotics/locomotion"])
    before = {
        n.slug_path: (n.archived, b.grant_gpu_hours)
        for n in BudgetNode.objects.all()
        for b in [balances([n], period)[n.pk]]
    }

    call_command("seed_demo")  # a second `make demo` on the used database

    after = {
        n.slug_path: (n.archived, b.grant_gpu_hours)
        for n in BudgetNode.objects.all()
        for b in [balances([n], period)[n.pk]]
    }
    assert after == before
    assert "nlp/safety" not in after and "vision/clip-scaling" not in after
    assert health.slug_path in after
    assert get_user_model().objects.filter(username__in=["leader", "researcher"]).count() == 2
