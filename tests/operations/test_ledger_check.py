"""The periodic ledger check (Celery beat): each cluster's finished attempts compared with the
simulated backend's record over the recent window, the result stored per cluster, one log
event per difference, and both shown on /metrics and /operations. The job runs through the
live loop; the wrong charge is planted in the ledger as tests/scheduling/test_reconcile_ledger.py
plants it."""

import datetime as dt
import logging

import pytest
import time_machine
from django.conf import settings as django_settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from budgets import ledger
from budgets.models import GpuType, UsageEntry
from scheduling import dispatch, tasks
from scheduling.models import LedgerCheck
from tests.operations.test_metrics import scrape, value
from tests.scheduling.test_pages_overview import OPERATIONS_PAGE_QUERIES
from tests.scheduling.test_reconcile_ledger import T0, run_to_completion

CHECKED_AT = T0 + dt.timedelta(minutes=45)


@pytest.fixture
def committed(django_capture_on_commit_callbacks):
    return lambda: django_capture_on_commit_callbacks(execute=True)


@pytest.fixture
def job(researcher, budget_tree, cluster, committed):
    """Two GPUs for 30 minutes on the simulated backend, synced and charged: 3,600 GPU-s."""
    return run_to_completion(researcher, cluster, committed)


def plant_a_charge_past_the_end(job):
    extra = T0 + dt.timedelta(minutes=31)  # ten minutes on 2 GPUs after the real end
    ledger.charge_usage(
        job.project, job.pk, job.owner, GpuType.objects.get(name="H100"), extra,
        extra + dt.timedelta(minutes=10), 2 * 600,
    )  # fmt: skip


def check_ledger(at=CHECKED_AT):
    with time_machine.travel(at, tick=False):
        tasks.check_ledger_all()


def ledger_row(page: str, cluster) -> str:
    row = page[page.index(f'id="ops-ledger-{cluster.pk}"') :]
    return row[: row.index("</tr>")]


def test_the_periodic_check_stores_a_planted_difference_and_logs_it(job, cluster, caplog):
    plant_a_charge_past_the_end(job)
    charged = sorted(UsageEntry.objects.filter(job_ref=job.pk).values_list("pk", "gpu_seconds"))
    caplog.set_level(logging.INFO, logger="scheduling.ledger_check")
    check_ledger()
    check = LedgerCheck.objects.get(cluster=cluster)
    assert (check.checked_at, check.differences, check.gap_gpu_seconds) == (CHECKED_AT, 1, 1200)
    assert check.since == CHECKED_AT - dt.timedelta(
        seconds=django_settings.ALLOT_LEDGER_CHECK_WINDOW_S
    )
    assert check.worst == [
        {
            "job_id": job.pk,
            "job_name": "t",
            "attempt_key": job.attempt_key,
            "charged_gpu_s": 4800,
            "backend_gpu_s": 3600,
        }
    ]
    logged = [r for r in caplog.records if getattr(r, "event", "") == "ledger_difference"]
    assert [(r.levelno, r.cluster, r.job, r.attempt) for r in logged] == [
        (logging.WARNING, "jupiter", job.pk, job.attempt_key)
    ]
    assert (
        logged[0].charged_gpu_seconds,
        logged[0].backend_gpu_seconds,
        logged[0].gap_gpu_seconds,
    ) == (4800, 3600, 1200)
    # It repairs nothing.
    assert (
        sorted(UsageEntry.objects.filter(job_ref=job.pk).values_list("pk", "gpu_seconds"))
        == charged
    )


def test_the_metric_and_the_page_show_the_stored_difference(job, cluster, client, cluster_admin):
    plant_a_charge_past_the_end(job)
    check_ledger()
    samples = scrape(client)
    assert value(samples, "allot_ledger_discrepancy_gpu_hours", cluster="jupiter") == (
        pytest.approx(1200 / 3600)
    )
    assert value(samples, "allot_ledger_differences", cluster="jupiter") == 1
    client.force_login(cluster_admin)
    with time_machine.travel(CHECKED_AT + dt.timedelta(minutes=10), tick=False):
        row = ledger_row(client.get(reverse("operations")).content.decode(), cluster)
    cells = [c.split("<")[0] for c in row.split('<td class="num">')[1:]]
    assert cells == ["1", "0.33"]
    assert "10\xa0minutes ago" in row
    assert f'<a href="{reverse("job-detail", args=[job.pk])}">#{job.pk} t</a>' in row
    assert "1.33 vs 1.00" in row and "+0.33" in row


def test_a_right_ledger_is_stored_as_zero_and_shown_as_zero(job, cluster, client, cluster_admin):
    check_ledger()
    check = LedgerCheck.objects.get(cluster=cluster)
    assert (check.checked_at, check.differences, check.gap_gpu_seconds) == (CHECKED_AT, 0, 0)
    assert check.worst == []
    samples = scrape(client)
    assert value(samples, "allot_ledger_discrepancy_gpu_hours", cluster="jupiter") == 0
    assert value(samples, "allot_ledger_differences", cluster="jupiter") == 0
    client.force_login(cluster_admin)
    row = ledger_row(client.get(reverse("operations")).content.decode(), cluster)
    assert "charges match the backend" in row


def test_a_cluster_never_checked_has_no_series_and_says_so(cluster, client, cluster_admin):
    samples = scrape(client)
    assert not [key for key in samples if key[0].startswith("allot_ledger_")]
    client.force_login(cluster_admin)
    assert "not run yet" in ledger_row(client.get(reverse("operations")).content.decode(), cluster)


def test_a_backend_that_does_not_answer_keeps_the_last_figures_and_says_why(
    job, cluster, client, cluster_admin
):
    plant_a_charge_past_the_end(job)
    check_ledger()
    dispatch.backend_for(cluster).set_outage(True)
    check_ledger(CHECKED_AT + dt.timedelta(hours=1))
    check = LedgerCheck.objects.get(cluster=cluster)
    assert (check.checked_at, check.differences, check.gap_gpu_seconds) == (CHECKED_AT, 1, 1200)
    assert "does not answer" in check.error
    with time_machine.travel(CHECKED_AT + dt.timedelta(hours=1), tick=False):
        samples = scrape(client)
        client.force_login(cluster_admin)
        row = ledger_row(client.get(reverse("operations")).content.decode(), cluster)
    assert value(samples, "allot_ledger_check_age_seconds", cluster="jupiter") == 3600
    assert "last try unanswered" in row
    dispatch.backend_for(cluster).set_outage(False)
    check_ledger(CHECKED_AT + dt.timedelta(hours=1))
    check.refresh_from_db()
    assert (check.checked_at, check.error) == (CHECKED_AT + dt.timedelta(hours=1), "")


def test_the_operations_page_query_count_holds_with_a_stored_check(
    job, cluster, client, cluster_admin
):
    plant_a_charge_past_the_end(job)
    check_ledger()
    client.force_login(cluster_admin)
    with CaptureQueriesContext(connection) as queries:
        client.get(reverse("operations"))
    assert len(queries) == OPERATIONS_PAGE_QUERIES


def test_beat_runs_the_check_at_the_configured_interval():
    entry = django_settings.CELERY_BEAT_SCHEDULE["check-ledger"]
    assert entry == {
        "task": "scheduling.tasks.check_ledger_all",
        "schedule": django_settings.ALLOT_LEDGER_CHECK_INTERVAL_S,
    }
