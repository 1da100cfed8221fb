"""The queues: every cluster at a glance, and one cluster's pending jobs in queue order.

A busy queue holds thousands of waiting jobs, so the cluster page shows one slice of
``PAGE_SIZE`` at a time (the head first), the viewer's own waiting jobs wherever they stand,
and counts from one aggregate; htmx's "load more" appends the next slice in place. Everyone
signed in sees every entry; jobs the viewer may not see (``visible_jobs``) keep their place,
size, reason and estimate but not their name, owner or project.
"""

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count, Q, Sum
from django.utils import timezone

from scheduling import reports
from scheduling.access import get_cluster, visible_jobs
from scheduling.models import Job
from scheduling.views import render_page

PAGE_SIZE = 50
MINE_LIMIT = 50
MORE_TARGET = "queue-more"


@login_required
def queue_index(request):
    context = {"summaries": reports.cluster_summaries()}
    return render_page(request, "scheduling/queue_index.html", "clusters", context)


@login_required
def cluster_queue(request, name):
    cluster = get_cluster(name)
    waiting = Job.objects.for_queue_page(cluster)
    counts = waiting.aggregate(
        jobs=Count("id"),
        gpus=Sum("gpus", default=0),
        mine=Count("id", filter=Q(owner=request.user)),
    )
    paginator = Paginator(waiting, PAGE_SIZE)
    paginator.count = counts["jobs"]  # already counted above: spare the paginator its COUNT(*)
    # Out-of-range numbers give the last page, anything not a number the first: never a 500.
    asked = request.GET.get("page")
    page = paginator.get_page(asked)
    # "Load more" asks for the next slice's rows only; a poll or a plain link gets the whole queue.
    appended = bool(request.htmx and request.htmx.target == MORE_TARGET)
    # A "load more" past the end (the queue shrank since the page loaded) appends nothing,
    # rather than the last slice again.
    pending = [] if appended and str(page.number) != asked else list(page.object_list)
    mine = list(waiting.filter(owner=request.user)[:MINE_LIMIT])
    running = list(Job.objects.running_on_queue_page(cluster))
    _mark(request.user, pending + mine + running)
    context = {
        "cluster": cluster,
        "now": timezone.now(),
        "page": page,
        "pending": pending,
        "mine": mine,
        "counts": counts,
        "mine_limit": MINE_LIMIT,
        "more_target": MORE_TARGET,
        "running": running,
        "total_gpus": sum(n.gpus for n in cluster.nodes.filter(present=True)),
        "busy_gpus": sum(job.gpus for job in running),
    }
    context["appended"] = appended
    partial = "rows" if appended else "queue"
    return render_page(request, "scheduling/cluster_queue.html", partial, context)


def _mark(user, jobs):
    """Which rows the viewer may see in full, and which running jobs sit idle: one query for
    the rows on this page, however long the queue."""
    shown = set(
        visible_jobs(user).filter(pk__in={job.pk for job in jobs}).values_list("pk", flat=True)
    )
    now = timezone.now()
    for job in jobs:
        job.shown = job.pk in shown
        job.idle = reports.is_idle(job, now)
