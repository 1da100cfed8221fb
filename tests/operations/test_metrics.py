"""GET /metrics: who may read it, what it says after the live loop ran, what it costs."""

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling import tasks
from scheduling.models import Job, OperationStat
from scheduling.services import JobRequest, submit_job
from tests.operations.conftest import parse

LOOPBACK = {"REMOTE_ADDR": "127.0.0.1"}
ELSEWHERE = {"REMOTE_ADDR": "10.1.2.3"}


def submit(user, gpus, project="nlp/olmo", name="train"):
    return submit_job(
        user,
        JobRequest(
            name=name,
            project=project,
            cluster="jupiter",
            gpus=gpus,
            min_runtime_s=3600,
            sim_duration_s=7200,
        ),
    )


def scrape(client, **extra) -> dict:
    response = client.get("/metrics", **LOOPBACK, **extra)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return parse(response.content.decode())


def value(samples, name, **labels):
    return samples[(name, frozenset(labels.items()))]


@pytest.mark.django_db
def test_metrics_are_open_on_loopback_without_a_login(client):
    assert client.get("/metrics", **LOOPBACK).status_code == 200


@pytest.mark.django_db
def test_metrics_from_elsewhere_need_a_token_and_say_how_to_set_one(client, settings):
    settings.ALLOT_METRICS_TOKEN = ""
    response = client.get("/metrics", **ELSEWHERE)
    assert response.status_code == 403
    assert b"ALLOT_METRICS_TOKEN" in response.content


@pytest.mark.django_db
def test_metrics_from_elsewhere_answer_the_right_bearer_token_only(client, settings):
    settings.ALLOT_METRICS_TOKEN = "s3cret-token"
    assert client.get("/metrics", **ELSEWHERE).status_code == 401
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope", **ELSEWHERE)
    assert wrong.status_code == 401
    assert wrong["WWW-Authenticate"].startswith("Bearer")
    right = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token", **ELSEWHERE)
    assert right.status_code == 200
    assert b"allot_jobs" in right.content


@pytest.mark.django_db
@pytest.mark.parametrize("behind_proxy", [True, False])
@pytest.mark.parametrize("header", ["HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP"])
def test_a_request_forwarded_by_a_local_proxy_is_not_loopback(
    client, settings, behind_proxy, header
):
    settings.ALLOT_BEHIND_PROXY = behind_proxy
    settings.ALLOT_METRICS_TOKEN = "s3cret-token"
    response = client.get("/metrics", **{header: "203.0.113.9"}, **LOOPBACK)
    assert response.status_code == 401


def test_metrics_follow_the_live_loop(client, researcher, cluster, settings):
    """Jobs submitted, a pass, a sync and a charge run as the worker runs them: the contract's
    series show the cluster's GPUs, jobs, budgets and the pass's latency histogram."""
    settings.ALLOT_METRICS_CACHE_S = 0
    running = submit(researcher, gpus=8, name="a")
    submit(researcher, gpus=8, project="", name="free")
    waiting = submit(researcher, gpus=16, name="big")
    tasks.schedule_cluster(cluster.pk)
    tasks.sync_cluster(cluster.pk)
    Job.objects.filter(pk=running.pk).update(last_charged_at=timezone.now() - timedelta(hours=2))
    tasks.charge_usage()
    samples = scrape(client)

    assert Job.objects.get(pk=running.pk).state == "running"
    assert Job.objects.get(pk=waiting.pk).state == "pending"
    assert value(samples, "allot_gpus", cluster="jupiter", state="busy") == 16
    assert value(samples, "allot_gpus", cluster="jupiter", state="idle") == 0
    assert value(samples, "allot_jobs", cluster="jupiter", state="running") == 2
    assert value(samples, "allot_jobs", cluster="jupiter", state="pending") == 1
    assert value(samples, "allot_running_gpus", cluster="jupiter", funded="true") == 8
    assert value(samples, "allot_queue_jobs", cluster="jupiter", reason="Resources") == 1
    assert value(samples, "allot_oldest_pending_seconds", cluster="jupiter") >= 0
    assert value(samples, "allot_pass_duration_seconds_count", cluster="jupiter") == 1
    assert value(samples, "allot_pass_duration_seconds_bucket", cluster="jupiter", le="+Inf") == 1
    assert value(samples, "allot_reconcile_duration_seconds_count", cluster="jupiter") == 1
    assert value(samples, "allot_operation_errors_total", operation="pass", cluster="jupiter") == 0
    assert value(samples, "allot_last_pass_age_seconds", cluster="jupiter") < 60
    charged = value(samples, "allot_charged_gpu_hours_total", path="nlp/olmo")
    assert charged == pytest.approx(16.0, abs=0.1)  # 8 GPUs × 2 h, H100 at 1.0
    assert value(samples, "allot_charged_gpu_hours_total", path="nlp") == charged
    grant = value(samples, "allot_budget_grant_gpu_hours", path="nlp/olmo")
    remaining = value(samples, "allot_budget_remaining_gpu_hours", path="nlp/olmo")
    assert grant == 3000
    assert remaining < grant - charged + 0.01  # charges and the open lien both count
    assert value(samples, "allot_budget_burn_gpu_hours_per_hour", path="nlp/olmo") == (
        pytest.approx(charged / 24, abs=0.01)
    )


def test_a_failed_sync_counts_as_a_reconcile_error(client, researcher, cluster, settings):
    settings.ALLOT_METRICS_CACHE_S = 0
    cluster.options = {**cluster.options, "fail": "1"}
    cluster.save(update_fields=["options"])
    from scheduling.backends.base import BackendUnavailable

    def down(self):
        raise BackendUnavailable("the controller is down")

    from scheduling.backends import simulated

    original = simulated.SimulatedBackend.sync
    simulated.SimulatedBackend.sync = down
    try:
        tasks.sync_cluster(cluster.pk)
    finally:
        simulated.SimulatedBackend.sync = original
    samples = scrape(client)
    labels = dict(operation="reconcile", cluster="jupiter")
    assert value(samples, "allot_operation_errors_total", **labels) == 1
    assert value(samples, "allot_cluster_reachable", cluster="jupiter") == 0


def test_latencies_land_in_their_cumulative_buckets(db):
    from scheduling.opstats import observe

    for seconds in (0.003, 0.2, 0.2, 7.0, 500.0):
        observe("pass", "jupiter", seconds)
    rows = dict(
        OperationStat.objects.filter(operation="pass", cluster="jupiter").values_list("le", "count")
    )
    assert rows[0.005] == 1
    assert rows[0.25] == 3
    assert rows[10.0] == 4
    assert rows[60.0] == 4
    assert rows[OperationStat.INF_LE] == 5


def test_preemptions_are_counted_by_cause(client, researcher, cluster, settings):
    """Unfunded work yields to a funded job: the engine's own preemption, counted as such."""
    settings.ALLOT_METRICS_CACHE_S = 0
    submit(researcher, gpus=16, project="", name="free")
    tasks.schedule_cluster(cluster.pk)
    submit(researcher, gpus=8, name="funded")
    tasks.schedule_cluster(cluster.pk)
    samples = scrape(client)
    assert value(samples, "allot_preemptions_total", cluster="jupiter", reason="unfunded") == 1


def test_the_answer_is_cached_between_scrapes(client, researcher, cluster, settings):
    settings.ALLOT_METRICS_CACHE_S = 300
    before = scrape(client)
    submit(researcher, gpus=8)
    assert scrape(client) == before
    settings.ALLOT_METRICS_CACHE_S = 0
    assert value(scrape(client), "allot_jobs", cluster="jupiter", state="pending") == 1


def test_a_scrape_costs_a_fixed_number_of_queries(
    client, researcher, cluster, settings, django_assert_num_queries, tmp_path
):
    """Fourteen queries whatever the number of jobs, clusters and budget nodes (the last
    ledger check of each cluster comes with the clusters' query)."""
    from tests.scheduling.conftest import make_cluster

    settings.ALLOT_METRICS_CACHE_S = 0
    for index in range(5):
        submit(researcher, gpus=8, name=f"j{index}")
    make_cluster(tmp_path / "b", name="saturn", gpu_type="B200", factor="2.000")
    tasks.schedule_cluster(cluster.pk)
    tasks.check_ledger_all()
    with django_assert_num_queries(14):
        client.get("/metrics", **LOOPBACK)
    for index in range(20):
        submit(researcher, gpus=1, name=f"k{index}")
    tasks.schedule_cluster(cluster.pk)
    with django_assert_num_queries(14):
        client.get("/metrics", **LOOPBACK)


def test_a_pass_that_raises_is_timed_as_an_error_and_still_raises(cluster, monkeypatch):
    def broken(cluster_id):
        raise RuntimeError("engine bug")

    monkeypatch.setattr(tasks, "run_pass", broken)
    with pytest.raises(RuntimeError, match="engine bug"):
        tasks.schedule_cluster(cluster.pk)
    total = OperationStat.objects.get(operation="pass", cluster="jupiter", le=OperationStat.INF_LE)
    assert (total.count, total.errors) == (1, 1)
