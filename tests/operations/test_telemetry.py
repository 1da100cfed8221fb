"""GPU telemetry (DCGM in Prometheus) for Slurm and Kubernetes jobs: readings mapped to jobs,
idle jobs flagged on their pages, wasted GPU-hours counted, owners told once."""

import datetime as dt
from datetime import timedelta

import pytest
import time_machine
from django.core import mail
from django.utils import timezone

from exceptions.models import Notification
from scheduling import tasks, telemetry
from scheduling.models import Job, JobEvent, OperationStat
from tests.operations.conftest import parse, prom_query, targets, wait_for
from tests.operations.fake_prometheus import DcgmExporter, QueryApi
from tests.scheduling.test_pages_factories import make_cluster, make_job

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)


@pytest.fixture
def api(settings):
    server = QueryApi()
    settings.ALLOT_GPU_TELEMETRY_URL = server.url
    yield server
    server.close()


@pytest.fixture
def slurm(db):
    return make_cluster(name="hopper", backend="slurm")


@pytest.fixture
def kube(db):
    return make_cluster(name="kube", backend="kubernetes")


def run(job_owner, cluster, project, external_id, gpus=8, **fields):
    return make_job(
        job_owner,
        cluster,
        project=project,
        state="running",
        gpus=gpus,
        external_id=external_id,
        dispatched=True,
        **fields,
    )


def read_at(moment, committed=None):
    with time_machine.travel(moment, tick=False):
        return telemetry.read_and_record()


def test_slurm_and_kubernetes_jobs_take_their_own_readings(
    api, slurm, kube, researcher, budget_tree
):
    on_slurm = run(researcher, slurm, budget_tree.olmo, "4242")
    on_kube = run(researcher, kube, budget_tree.olmo, "allot-7-a1b2c3")
    elsewhere = run(researcher, slurm, budget_tree.olmo, "999")
    api.readings["hpc_job"] = {"4242": 87.0, "12": 50.0}
    api.readings["pod"] = {"allot-7-a1b2c3-x7k2p": 40.0, "allot-7-a1b2c3-q9w8e": 20.0}
    report = telemetry.read_and_record()
    assert report.read == 2
    assert Job.objects.get(pk=on_slurm.pk).gpu_utilization == pytest.approx(0.87)
    assert Job.objects.get(pk=on_kube.pk).gpu_utilization == pytest.approx(0.30)  # its pods' mean
    assert Job.objects.get(pk=elsewhere.pk).gpu_utilization is None  # no reading: unchanged
    assert api.queries == [
        'avg by (hpc_job) (DCGM_FI_DEV_GPU_UTIL{hpc_job!=""})',
        'avg by (pod) (DCGM_FI_DEV_GPU_UTIL{pod!=""})',
    ]


def test_a_job_idle_for_over_an_hour_is_flagged_counted_and_its_owner_told_once(
    api, slurm, researcher, budget_tree, client, django_capture_on_commit_callbacks
):
    researcher.email = "researcher@example.org"
    researcher.save(update_fields=["email"])
    job = run(researcher, slurm, budget_tree.olmo, "4242", started_at=T0 - timedelta(minutes=5))
    api.readings["hpc_job"] = {"4242": 3.0}
    with django_capture_on_commit_callbacks(execute=True):
        for minutes in range(0, 71, 10):  # a reading every 10 minutes for 70 minutes
            read_at(T0 + timedelta(minutes=minutes))
    job.refresh_from_db()
    assert job.low_utilization_since == T0
    assert job.wasted_gpu_seconds == 8 * 70 * 60  # 8 GPUs held idle for 70 minutes
    assert Notification.objects.filter(user=researcher, event="idle job").count() == 1
    assert len(mail.outbox) == 1
    assert "has used 3 % of its GPUs for 1 h 10 min: it costs nlp/olmo" in mail.outbox[0].body
    assert JobEvent.objects.filter(job=job, kind="idle").count() == 1

    client.force_login(researcher)
    with time_machine.travel(T0 + timedelta(minutes=71), tick=False):
        why = client.get(f"/jobs/{job.pk}/why/").content.decode()
        explain = client.get(f"/api/v1/jobs/{job.pk}/explain/").json()
    assert "has used 3 % of its GPUs for 1 h 11 min: it costs nlp/olmo 8 GPU-hours an hour" in why
    assert explain["idle"] is True
    assert explain["wasted_gpu_hours"] == pytest.approx(9.33, abs=0.01)


def test_the_running_page_flags_the_idle_job_and_the_projects_waste(
    api, slurm, leader, researcher, budget_tree, client
):
    job = run(researcher, slurm, budget_tree.olmo, "4242")
    api.readings["hpc_job"] = {"4242": 2.0}
    for minutes in range(0, 71, 10):
        read_at(timezone.now() - timedelta(minutes=70 - minutes))
    client.force_login(leader)
    page = client.get("/running/").content.decode()
    row = page[page.index(f'id="job-{job.pk}"') :][:800]
    assert "idle" in row
    assert '<td class="num wasted">9.3</td>' in page


def test_a_busy_reading_ends_the_spell(api, slurm, researcher, budget_tree):
    job = run(researcher, slurm, budget_tree.olmo, "4242")
    api.readings["hpc_job"] = {"4242": 1.0}
    for minutes in (0, 70):
        read_at(T0 + timedelta(minutes=minutes))
    api.readings["hpc_job"] = {"4242": 95.0}
    read_at(T0 + timedelta(minutes=80))
    job.refresh_from_db()
    assert job.low_utilization_since is None
    assert job.idle_notified_at is None
    assert job.wasted_gpu_seconds == 8 * 600  # the 70-minute gap counted 10 minutes at most


def test_unfunded_work_is_flagged_but_nobody_is_told(api, slurm, researcher, budget_tree):
    job = run(researcher, slurm, None, "4242")
    api.readings["hpc_job"] = {"4242": 0.0}
    for minutes in (0, 30, 61):
        read_at(T0 + timedelta(minutes=minutes))
    assert Job.objects.get(pk=job.pk).low_utilization_since == T0
    assert not Notification.objects.exists()


def test_telemetry_down_changes_nothing_and_counts_an_error(
    api, slurm, researcher, budget_tree, client, settings
):
    job = run(researcher, slurm, budget_tree.olmo, "4242")
    api.down = True
    assert tasks.read_gpu_telemetry() == 0
    assert Job.objects.get(pk=job.pk).gpu_utilization is None
    errors = OperationStat.objects.get(operation="telemetry", le=OperationStat.INF_LE).errors
    assert errors == 1
    settings.ALLOT_METRICS_CACHE_S = 0
    samples = parse(client.get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode())
    key = (
        "allot_operation_errors_total",
        frozenset({"operation": "telemetry", "cluster": ""}.items()),
    )
    assert samples[key] == 1


def test_wasted_gpu_hours_reach_the_metrics_by_project(
    api, slurm, researcher, budget_tree, client, settings
):
    settings.ALLOT_METRICS_CACHE_S = 0
    run(researcher, slurm, budget_tree.olmo, "4242")
    api.readings["hpc_job"] = {"4242": 5.0}
    for minutes in (0, 10, 20):
        read_at(T0 + timedelta(minutes=minutes))
    samples = parse(client.get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode())
    for path in ("nlp/olmo", "nlp"):
        key = ("allot_wasted_gpu_hours_total", frozenset({"path": path}.items()))
        assert samples[key] == pytest.approx(8 * 20 / 60)


def test_a_real_prometheus_scraping_a_dcgm_exporter_feeds_the_jobs_page(
    prometheus, slurm, kube, researcher, budget_tree, client, settings
):
    """The production path: dcgm-exporter → Prometheus → Allot's telemetry reader."""
    exporter = DcgmExporter()
    try:
        slurm_job = run(researcher, slurm, budget_tree.olmo, "4242", gpus=2)
        kube_job = run(researcher, kube, budget_tree.olmo, "allot-9-deadbeef", gpus=1)
        exporter.gpus = [
            {"hpc_job": "4242", "util": 3},
            {"hpc_job": "4242", "util": 5},
            {"pod": "allot-9-deadbeef-7xk2p", "util": 96},
            {"util": 0},  # a GPU nothing runs on
        ]
        base = prometheus({"dcgm": (exporter.address, "/metrics")})
        try:
            wait_for(lambda: prom_query(base, 'DCGM_FI_DEV_GPU_UTIL{hpc_job="4242"}'))
            wait_for(lambda: prom_query(base, 'DCGM_FI_DEV_GPU_UTIL{pod!=""}'))
        except AssertionError:
            raise AssertionError(
                f"Prometheus never scraped the exporter: {targets(base)}"
            ) from None
        settings.ALLOT_GPU_TELEMETRY_URL = base
        assert tasks.read_gpu_telemetry() == 2
        slurm_job.refresh_from_db()
        kube_job.refresh_from_db()
        assert slurm_job.gpu_utilization == pytest.approx(0.04)
        assert kube_job.gpu_utilization == pytest.approx(0.96)
        assert slurm_job.low_utilization_since is not None
        assert kube_job.low_utilization_since is None
        client.force_login(researcher)
        with time_machine.travel(timezone.now() + timedelta(minutes=61)):
            why = client.get(f"/jobs/{slurm_job.pk}/why/").content.decode()
        assert "4 % busy" in why
        assert "it costs nlp/olmo 2 GPU-hours an hour" in why
    finally:
        exporter.close()


def test_the_simulated_backends_own_readings_count_waste_and_tell_the_owner(
    tmp_path, researcher, budget_tree, eager_celery, django_capture_on_commit_callbacks
):
    """The demo's clusters report utilisation through reconcile: the same spell, waste and
    notification as telemetry, driven through a pass and syncs over simulated time."""
    from scheduling.services import JobRequest, submit_job
    from tests.scheduling.conftest import make_cluster as make_sim_cluster

    with time_machine.travel(T0, tick=False) as clock:
        cluster = make_sim_cluster(tmp_path)
        job = submit_job(
            researcher,
            JobRequest(
                name="idle-notebook",  # the simulated backend makes a job named *idle* squat
                project="nlp/olmo",
                cluster="jupiter",
                gpus=8,
                min_runtime_s=3600,
                sim_duration_s=4 * 3600,
            ),
        )
        with django_capture_on_commit_callbacks(execute=True):
            tasks.schedule_cluster(cluster.pk)
        for minutes in range(0, 71, 10):
            clock.move_to(T0 + timedelta(minutes=minutes))
            tasks.sync_cluster(cluster.pk)
    job.refresh_from_db()
    assert job.state == "running"
    assert job.gpu_utilization < 0.1
    assert job.wasted_gpu_seconds == 8 * 70 * 60
    note = Notification.objects.get(user=researcher, event="idle job")
    assert "it costs nlp/olmo 8 GPU-hours an hour" in note.message
