"""A real Prometheus (Debian's /usr/bin/prometheus) scrapes the live server's /metrics; its
query API then returns the contract's series with the values the database holds."""

import httpx
import pytest

from scheduling import tasks
from scheduling.services import JobRequest, submit_job
from tests.operations.conftest import prom_query, targets, wait_for
from tests.operations.test_grafana_dashboard import dashboard_queries
from tests.scheduling.conftest import make_cluster

CONTRACT = (
    "allot_gpus",
    "allot_jobs",
    "allot_pass_duration_seconds_bucket",
    "allot_budget_remaining_gpu_hours",
    "allot_charged_gpu_hours_total",
    "allot_preemptions_total",
)


@pytest.mark.django_db(transaction=True)
def test_prometheus_scrapes_the_contract_series(live_server, prometheus, researcher, tmp_path):
    cluster = make_cluster(tmp_path)
    for name in ("a", "b"):
        submit_job(
            researcher,
            JobRequest(
                name=name, project="nlp/olmo", cluster="jupiter", gpus=8, min_runtime_s=3600
            ),
        )
    submit_job(
        researcher,
        JobRequest(name="free", project="", cluster="jupiter", gpus=8, min_runtime_s=3600),
    )
    tasks.schedule_cluster(cluster.pk)
    tasks.sync_cluster(cluster.pk)
    address = live_server.url.removeprefix("http://")
    base = prometheus({"allot": (address, "/metrics")})

    try:
        up = wait_for(lambda: prom_query(base, 'up{job="allot"} == 1'))
    except AssertionError:
        raise AssertionError(f"Prometheus never scraped Allot: {targets(base)}") from None
    assert up[0]["metric"]["instance"] == address
    for name in CONTRACT:
        wait_for(lambda name=name: prom_query(base, name), what=f"no {name}")
    busy = prom_query(base, 'allot_gpus{cluster="jupiter", state="busy"}')
    assert float(busy[0]["value"][1]) == 16
    running = prom_query(base, 'allot_jobs{cluster="jupiter", state="running"}')
    assert float(running[0]["value"][1]) == 2
    remaining = prom_query(base, 'allot_budget_remaining_gpu_hours{path="nlp/olmo"}')
    assert 0 < float(remaining[0]["value"][1]) < 3000  # two liens held
    passes = prom_query(base, 'allot_pass_duration_seconds_count{cluster="jupiter"}')
    assert float(passes[0]["value"][1]) == 1
    # Every query of the Grafana dashboard is valid PromQL there; those without a rate() over
    # minutes (which a few seconds of scrapes cannot fill) already return series.
    for expr in dashboard_queries():
        if expr.startswith("label_values"):
            continue
        expr = expr.replace("$cluster", ".*").replace("$path", ".*")
        answer = httpx.get(f"{base}/api/v1/query", params={"query": expr}, timeout=5).json()
        assert answer["status"] == "success", (expr, answer)
        if "rate(" not in expr and "increase(" not in expr:
            assert answer["data"]["result"], expr
    scrape = prom_query(base, 'scrape_duration_seconds{job="allot"}')
    assert float(scrape[0]["value"][1]) < 1  # within the scrape timeout, or it would be down
