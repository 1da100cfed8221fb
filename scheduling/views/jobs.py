"""My jobs (list and submit), one job's page with its timeline, and cancellation."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from scheduling import services
from scheduling.access import can_see_command, get_job_for_user
from scheduling.errors import JobError
from scheduling.forms import JobSubmitForm
from scheduling.models import Cluster, Job
from scheduling.reports import is_idle
from scheduling.views import render_page


def _url(job) -> str:
    return reverse("job-detail", args=[job.pk])


def _list_context(user, form) -> dict:
    now = timezone.now()
    jobs = list(Job.objects.for_user_page(user).order_by("-submitted_at", "-id")[:200])
    for job in jobs:
        job.idle = is_idle(job, now)
    return {
        "jobs": jobs,
        "form": form,
        "now": now,
        "live": any(not job.is_terminal for job in jobs),
    }


@login_required
@require_http_methods(["GET", "POST"])
def job_list(request):
    clusters = list(Cluster.objects.order_by("name"))
    form = JobSubmitForm(request.POST or None, user=request.user, clusters=clusters)
    if request.method == "POST" and form.is_valid():
        try:
            job = services.submit_job(request.user, form.to_request())
        except JobError as exc:
            form.add_refusal(exc)
        else:
            messages.success(request, f"Job #{job.pk} submitted; the next pass will place it.")
            if request.htmx:
                return HttpResponseClientRedirect(_url(job))
            return redirect(_url(job))
    partial = "submit-form" if request.method == "POST" else "job-table"
    status = 400 if request.method == "POST" and not request.htmx else 200
    return render_page(
        request,
        "scheduling/job_list.html",
        partial,
        _list_context(request.user, form),
        status=status,
    )


@login_required
def job_detail(request, pk):
    job = get_job_for_user(request.user, pk)
    job.idle = is_idle(job)
    context = {
        "job": job,
        "events": list(job.events.all()),
        "now": timezone.now(),
        "min_runtime_h": job.min_runtime_s / 3600,
        "can_cancel": services.can_cancel(request.user, job) and not job.is_terminal,
        "command": job.command if can_see_command(request.user, job) else None,
        # Declared variables may hold credentials: shown to whoever may see the command.
        "env": sorted((job.env or {}).items()) if can_see_command(request.user, job) else [],
        "protection_request": services.protection_request_url(job),
    }
    return render_page(request, "scheduling/job_detail.html", "job-status", context)


@login_required
@require_POST
def job_cancel(request, pk):
    job = get_job_for_user(request.user, pk, write=True)
    try:
        services.cancel_job(request.user, job.pk)
    except JobError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Job #{job.pk} cancelled.")
    if request.htmx:
        return HttpResponseClientRedirect(_url(job))
    return redirect(_url(job))
