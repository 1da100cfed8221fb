"""What preemption costs, on /operations and /metrics: the work each preemption lost by the
cost model (a whole run if not resumable, else the work since the last checkpoint plus the
restart), over a day and a week, and the jobs preempted most often. Preemptions are made by
the live loop itself: unfunded work yields to a funded job."""

from datetime import timedelta

import pytest
import time_machine
from django.urls import reverse
from django.utils import timezone

from scheduling import tasks
from scheduling.models import Job, JobEvent
from scheduling.services import JobRequest, cancel_job, submit_job
from tests.operations.test_metrics import scrape, value

T0 = timezone.now().replace(microsecond=0) - timedelta(days=20)
RAN_S = 6000  # the unfunded job's run before the funded one arrives: checkpoint at 5,400 s


def submit(user, gpus, project, name, resumable=True):
    return submit_job(
        user,
        JobRequest(
            name=name,
            project=project,
            cluster="jupiter",
            gpus=gpus,
            min_runtime_s=3600,
            resumable=resumable,
            sim_duration_s=20 * 3600,
        ),
    )


def preempt_unfunded_work(researcher, cluster, resumable=True):
    """16 unfunded GPUs run 6,000 s; a funded 8-GPU job arrives and the pass preempts them."""
    with time_machine.travel(T0, tick=False):
        free = submit(researcher, 16, "", "free", resumable=resumable)
        tasks.schedule_cluster(cluster.pk)
    with time_machine.travel(T0 + timedelta(seconds=RAN_S), tick=False):
        submit(researcher, 8, "nlp/olmo", "funded")
        tasks.schedule_cluster(cluster.pk)
        tasks.sync_cluster(cluster.pk)  # the backend confirms the stop: requeued
    free.refresh_from_db()
    assert free.state == Job.State.PENDING
    return free


@pytest.fixture
def scraped_at(client, settings):
    settings.ALLOT_METRICS_CACHE_S = 0

    def at(moment):
        with time_machine.travel(moment, tick=False):
            return scrape(client)

    return at


def test_a_resumable_job_loses_the_work_since_its_checkpoint_and_its_restart(
    researcher, cluster, scraped_at
):
    preempt_unfunded_work(researcher, cluster)
    # 6,000 s of progress, last checkpoint at 5,400 s: 600 s lost, and a 300 s restart, x 16
    lost = 16 * (600 + 300) / 3600
    samples = scraped_at(T0 + timedelta(seconds=RAN_S + 60))
    assert value(samples, "allot_preemption_lost_gpu_hours", cluster="jupiter", window="1d") == (
        pytest.approx(lost)
    )
    assert value(samples, "allot_preemption_lost_gpu_hours", cluster="jupiter", window="7d") == (
        pytest.approx(lost)
    )
    assert value(samples, "allot_job_preemptions_max", cluster="jupiter") == 1


def test_a_job_that_is_not_resumable_loses_its_whole_run(researcher, cluster, scraped_at):
    preempt_unfunded_work(researcher, cluster, resumable=False)
    samples = scraped_at(T0 + timedelta(seconds=RAN_S + 60))
    assert value(
        samples, "allot_preemption_lost_gpu_hours", cluster="jupiter", window="1d"
    ) == pytest.approx(16 * RAN_S / 3600)


def test_the_windows_forget_old_preemptions(researcher, cluster, scraped_at):
    preempt_unfunded_work(researcher, cluster, resumable=False)
    two_days = scraped_at(T0 + timedelta(days=2))
    assert value(two_days, "allot_preemption_lost_gpu_hours", cluster="jupiter", window="1d") == 0
    assert value(
        two_days, "allot_preemption_lost_gpu_hours", cluster="jupiter", window="7d"
    ) == pytest.approx(16 * RAN_S / 3600)
    assert value(two_days, "allot_job_preemptions_max", cluster="jupiter") == 1
    later = scraped_at(T0 + timedelta(days=8))
    assert value(later, "allot_preemption_lost_gpu_hours", cluster="jupiter", window="7d") == 0
    assert value(later, "allot_job_preemptions_max", cluster="jupiter") == 0


def test_a_cluster_without_preemptions_reports_zeros(client, cluster, settings):
    settings.ALLOT_METRICS_CACHE_S = 0
    samples = scrape(client)
    assert value(samples, "allot_preemption_lost_gpu_hours", cluster="jupiter", window="1d") == 0
    assert value(samples, "allot_job_preemptions_max", cluster="jupiter") == 0


def test_a_job_preempted_again_is_counted_twice(researcher, cluster, scraped_at):
    """The requeued unfunded job starts again once the funded one is cancelled, and yields
    again to the next funded job: two preemptions of one job."""
    free = preempt_unfunded_work(researcher, cluster)
    funded = Job.objects.get(name="funded")
    funded_end = T0 + timedelta(seconds=RAN_S + 600)
    with time_machine.travel(funded_end, tick=False):
        cancel_job(researcher, funded.pk)
        tasks.sync_cluster(cluster.pk)
        tasks.schedule_cluster(cluster.pk)
    free.refresh_from_db()
    assert free.state == Job.State.RUNNING
    with time_machine.travel(funded_end + timedelta(hours=1), tick=False):
        submit(researcher, 8, "nlp/olmo", "funded-2")
        tasks.schedule_cluster(cluster.pk)
    assert JobEvent.objects.filter(job=free, kind="preempted").count() == 2
    samples = scraped_at(funded_end + timedelta(hours=1, minutes=1))
    assert value(samples, "allot_job_preemptions_max", cluster="jupiter") == 2


def test_operations_lists_the_most_preempted_jobs_with_the_work_lost(
    client, researcher, cluster, personas
):
    free = preempt_unfunded_work(researcher, cluster, resumable=False)
    client.force_login(personas["cluster_admin"])
    with time_machine.travel(T0 + timedelta(seconds=RAN_S + 60), tick=False):
        page = client.get(reverse("operations")).content.decode()
    row = page.split(f'id="ops-preempted-{free.pk}"')[1].split("</tr>")[0]
    assert f'href="{reverse("job-detail", args=[free.pk])}"' in row
    assert '<td class="num">1</td>' in row  # one preemption
    assert f"{16 * RAN_S / 3600:.1f}" in row  # 26.7 GPU-hours lost
    lost = page.split(f'id="ops-lost-{cluster.pk}"')[1].split("</tr>")[0]
    assert lost.count(f"{16 * RAN_S / 3600:.1f}") == 2  # in the day and in the week


def test_operations_says_when_nothing_was_preempted(client, cluster, personas):
    client.force_login(personas["cluster_admin"])
    assert (
        "No job was preempted in the last 7 days."
        in client.get(reverse("operations")).content.decode()
    )


def test_the_cost_model_follows_the_settings(researcher, cluster, scraped_at, settings):
    """Checkpoints every 10 min: the 6,000 s run lost nothing since its last one, only the
    restart of 2 min is counted."""
    settings.ALLOT_CHECKPOINT_INTERVAL_S = 600
    settings.ALLOT_RESTART_OVERHEAD_S = 120
    preempt_unfunded_work(researcher, cluster)
    samples = scraped_at(T0 + timedelta(seconds=RAN_S + 60))
    assert value(
        samples, "allot_preemption_lost_gpu_hours", cluster="jupiter", window="1d"
    ) == pytest.approx(16 * 120 / 3600)


def test_the_maximum_is_per_job_not_per_cluster(researcher, cluster, scraped_at):
    """Two unfunded 8-GPU jobs yield to one funded 16-GPU job: two preemptions, one each."""
    with time_machine.travel(T0, tick=False):
        for name in ("free-a", "free-b"):
            submit(researcher, 8, "", name)
        tasks.schedule_cluster(cluster.pk)
    with time_machine.travel(T0 + timedelta(seconds=RAN_S), tick=False):
        submit(researcher, 16, "nlp/olmo", "funded")
        tasks.schedule_cluster(cluster.pk)
    assert JobEvent.objects.filter(kind="preempted").count() == 2
    samples = scraped_at(T0 + timedelta(seconds=RAN_S + 60))
    assert value(samples, "allot_job_preemptions_max", cluster="jupiter") == 1
    assert value(
        samples, "allot_preemption_lost_gpu_hours", cluster="jupiter", window="1d"
    ) == pytest.approx(2 * 8 * (600 + 300) / 3600)
