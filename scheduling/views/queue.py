"""The queues: every cluster at a glance, and one cluster's pending jobs in queue order.

Positions only mean something when the whole queue is shown, so everyone signed in sees every
entry; jobs the viewer may not see (``visible_jobs``) keep their place, size, reason and
estimate but not their name, owner or project.
"""

from django.contrib.auth.decorators import login_required
from django.utils import timezone

from scheduling import reports
from scheduling.access import get_cluster, visible_jobs
from scheduling.models import Job
from scheduling.views import render_page


@login_required
def queue_index(request):
    context = {"summaries": reports.cluster_summaries()}
    return render_page(request, "scheduling/queue_index.html", "clusters", context)


@login_required
def cluster_queue(request, name):
    cluster = get_cluster(name)
    pending = list(Job.objects.for_queue_page(cluster))
    running = list(Job.objects.running_on_queue_page(cluster))
    shown = set(
        visible_jobs(request.user)
        .filter(cluster=cluster, state__in=["pending", "running"])
        .values_list("pk", flat=True)
    )
    now = timezone.now()
    for job in pending + running:
        job.shown = job.pk in shown
        job.idle = reports.is_idle(job, now)
    total = sum(n.gpus for n in cluster.nodes.filter(present=True))
    context = {
        "cluster": cluster,
        "now": now,
        "pending": pending,
        "running": running,
        "total_gpus": total,
        "busy_gpus": sum(job.gpus for job in running),
    }
    return render_page(request, "scheduling/cluster_queue.html", "queue", context)
