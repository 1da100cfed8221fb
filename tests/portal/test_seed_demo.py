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
    # robotics makes room for what clip-scaling spent (it grows with the seeded history, so
    # with the day of the period the test runs on): the root's grant, then robotics'.
    root, robotics = BudgetNode.objects.get(depth=1), node["robotics"]
    services.set_grant(leader, root, grant[root.pk] + spent(clip), reason="room for clip")
    services.set_grant(leader, robotics, grant[robotics.pk] + spent(clip), reason="room for clip")
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


def _finished_jobs():
    return Job.objects.filter(state__in=Job.TERMINAL).select_related("cluster")


@pytest.mark.django_db
def test_the_seeded_history_fits_the_clusters_and_keeps_them_busy(tmp_path, monkeypatch):
    from collections import defaultdict

    from django.utils import timezone

    monkeypatch.setenv("ALLOT_VAR_DIR", str(tmp_path))
    call_command("seed_demo")
    now = timezone.now()
    jobs = list(_finished_jobs())
    first = min(j.started_at for j in jobs)
    assert len(jobs) > 4000
    assert (now - first).days >= 35  # the what-if's four weeks and the window before them
    sizes = {n.name: n.gpus for c in Cluster.objects.all() for n in c.nodes.all()}
    changes = defaultdict(list)  # node -> [(time, +/- gpus)]: no GPU is ever double-booked
    busy = defaultdict(int)
    for job in jobs:
        assert job.submitted_at <= job.started_at < job.ended_at <= now
        assert sum(g for _, g in job.nodes) == job.gpus
        assert job.min_runtime_s <= 8 * 3600
        assert job.run_seconds_done == (job.ended_at - job.started_at).total_seconds()
        busy[job.cluster.name] += job.gpus * job.run_seconds_done
        for name, gpus in job.nodes:
            changes[name] += [(job.started_at, gpus), (job.ended_at, -gpus)]
    for name, moves in changes.items():
        held = 0
        for _, gpus in sorted(moves, key=lambda m: (m[0], m[1])):  # ends before starts
            held += gpus
            assert held <= sizes[name]
    for cluster in Cluster.objects.all():
        utilisation = busy[cluster.name] / (cluster.total_gpus() * (now - first).total_seconds())
        assert 0.8 <= utilisation <= 1.0, cluster.name


@pytest.mark.django_db
def test_the_ledger_charged_each_project_what_its_finished_jobs_cost(tmp_path, monkeypatch):
    from collections import Counter
    from decimal import Decimal

    from budgets.models import GpuType, Role, UsageEntry

    monkeypatch.setenv("ALLOT_VAR_DIR", str(tmp_path))
    call_command("seed_demo")
    price = {name: Decimal(f) for name, f in GpuType.objects.values_list("name", "cost_factor")}
    jobs = list(_finished_jobs())
    members = set(Role.objects.filter(role="researcher").values_list("user_id", "node_id"))
    cost, gpu_seconds = Counter(), Counter()
    for job in jobs:
        if job.project_id is None:
            assert not job.funded
            continue
        assert (job.owner_id, job.project_id) in members
        seconds = job.gpus * job.run_seconds_done
        gpu_seconds[job.project_id] += seconds
        cost[job.project_id] += int(seconds * price[job.cluster.gpu_type])
    charged, charged_s = Counter(), Counter()
    for node, cost_s, used_s in UsageEntry.objects.values_list(
        "node_id", "cost_gpu_seconds", "gpu_seconds"
    ):
        charged[node] += cost_s
        charged_s[node] += used_s
    assert len(cost) == 10  # every project ran work
    assert charged == cost
    assert charged_s == gpu_seconds
    assert set(UsageEntry.objects.values_list("job_ref", flat=True)) == {
        j.pk for j in jobs if j.project_id
    }


@pytest.mark.django_db
def test_the_demo_whatif_replays_thousands_of_jobs_over_four_weeks(tmp_path, monkeypatch):
    from django.utils import timezone

    from whatif.export import export_workload
    from whatif.replay import replay

    monkeypatch.setenv("ALLOT_VAR_DIR", str(tmp_path))
    call_command("seed_demo")
    workload = export_workload(4, timezone.now())
    assert len(workload.trace) > 2000
    assert workload.horizon_s > 27 * 86400
    projects = {row[2] for row in workload.trace}
    assert len(projects - {""}) == 10
    result = replay(workload.scenario, workload.trace_csv(), workload.horizon_s)
    assert 0.7 <= result["utilization"] <= 1.0
    assert result["jobs"]["completed"] > 2000


@pytest.mark.django_db
def test_seeding_again_after_the_demo_ran_adds_no_history(tmp_path, monkeypatch):
    import datetime as dt

    import time_machine
    from django.utils import timezone

    from budgets.models import UsageEntry
    from scheduling.accounting import charge_running_jobs
    from scheduling.passes import run_pass

    monkeypatch.setenv("ALLOT_VAR_DIR", str(tmp_path))
    call_command("seed_demo")
    with time_machine.travel(timezone.now() + dt.timedelta(minutes=1), tick=False) as clock:
        for cluster in Cluster.objects.all():
            run_pass(cluster.pk)
        assert Job.objects.filter(state="running").exists()
        clock.shift(dt.timedelta(minutes=10))
        charge_running_jobs()
        counts = (Job.objects.count(), UsageEntry.objects.count())
        call_command("seed_demo")  # a second `make demo` on the used database
        assert (Job.objects.count(), UsageEntry.objects.count()) == counts


@pytest.mark.django_db
def test_the_seeded_history_is_the_same_for_the_same_moment(tmp_path, monkeypatch):
    import datetime as dt

    import time_machine

    from budgets.models import UsageEntry
    from scheduling.demo_history import record_history
    from scheduling.models import JobEvent

    monkeypatch.setenv("ALLOT_VAR_DIR", str(tmp_path))
    at = dt.datetime(2026, 11, 20, 15, 30, tzinfo=dt.UTC)
    columns = ("name", "project", "owner", "gpus", "submitted_at", "started_at", "ended_at")

    def history():
        jobs = Job.objects.filter(state__in=Job.TERMINAL).order_by("started_at", "name")
        charges = UsageEntry.objects.order_by("interval_start", "node", "gpu_seconds")
        return list(jobs.values_list(*columns)), list(
            charges.values_list("node", "interval_start", "cost_gpu_seconds")
        )

    with time_machine.travel(at, tick=False):
        call_command("seed_demo")
        first = history()
        UsageEntry.objects.all().delete()
        JobEvent.objects.all().delete()
        Job.objects.all().delete()
        assert record_history()[0] == len(first[0])
        assert history() == first


@pytest.mark.django_db
def test_seeding_without_history_records_only_the_live_backlog(tmp_path, monkeypatch):
    from budgets.models import UsageEntry

    monkeypatch.setenv("ALLOT_VAR_DIR", str(tmp_path))
    call_command("seed_demo", "--no-history")
    assert not _finished_jobs().exists()
    assert not UsageEntry.objects.exists()
    assert Job.objects.filter(state="pending").count() > 150
