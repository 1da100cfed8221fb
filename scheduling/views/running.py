"""What runs right now, grouped by program and project, for leadership and cluster admins;
everyone else sees the same page over the jobs ``visible_jobs`` lets them see."""

from django.contrib.auth.decorators import login_required

from scheduling import reports
from scheduling.access import visible_jobs
from scheduling.views import render_page


@login_required
def running_overview(request):
    jobs = visible_jobs(request.user).for_running_overview().order_by("project__path", "id")
    context = reports.running_overview(jobs)
    return render_page(request, "scheduling/running.html", "overview", context)
