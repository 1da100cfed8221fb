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
