"""'Why is this consuming GPU-hours': one job's funding, rate, protection, standing, and what
would preempt it, from ``scheduling.explain.explain_job`` (the API's explain endpoint)."""

from django.contrib.auth.decorators import login_required
from django.utils.dateparse import parse_datetime

from scheduling.access import get_job_for_user
from scheduling.explain import explain_job
from scheduling.views import render_page


@login_required
def job_explain(request, pk):
    job = get_job_for_user(request.user, pk)
    why = explain_job(job, viewer=request.user)
    why["protected_until"] = parse_datetime(why["protected_until"] or "")
    context = {"job": job, "why": why, "live": job.state == job.State.RUNNING}
    return render_page(request, "scheduling/job_explain.html", "why", context)
