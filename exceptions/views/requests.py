"""Request an exception from a job, a budget node or a cluster; one request's history."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from budgets import access as budget_access
from exceptions import access, services
from exceptions.errors import ExceptionError
from exceptions.forms import ProtectionForm, ReservationForm, TopupForm
from exceptions.models import Kind

TITLES = {
    Kind.EXTENDED_PROTECTION: "Request longer protection",
    Kind.BUDGET_TOPUP: "Request a budget top-up",
    Kind.RESERVATION: "Request a reservation",
}


def _file(request, form, kind, target, **subject):
    """Validate the form, ask the service, and either go to the new request or show the form
    again with the service's message beside its field. ``subject`` names the object the
    request is about (job, node or cluster): the page shows it, the service gets its id."""
    if request.method == "POST" and form.is_valid():
        ids = {name: obj.pk for name, obj in subject.items()}
        data = {k: v for k, v in form.cleaned_data.items() if v not in ("", None)} | ids
        try:
            created = services.request_exception(request.user, kind, **data)
        except ExceptionError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(request, f"Exception #{created.pk} requested.")
            return redirect("exception-detail", created.pk)
    context = {"form": form, "kind": kind, "target": target, "title": TITLES[kind], **subject}
    return render(request, "exceptions/new.html", context, status=400 if form.errors else 200)


@login_required
def new_protection(request, job_id):
    from scheduling.access import get_job_for_user

    job = get_job_for_user(request.user, job_id, write=True)
    form = ProtectionForm(request.POST or None, initial={"hours": request.GET.get("hours", 12)})
    return _file(request, form, Kind.EXTENDED_PROTECTION, f"job #{job.pk} {job.name}", job=job)


@login_required
def new_topup(request, node_id):
    node = budget_access.get_node_for_user(request.user, node_id)
    form = TopupForm(request.POST or None)
    return _file(request, form, Kind.BUDGET_TOPUP, node.label, node=node)


@login_required
def new_reservation(request, cluster):
    from scheduling.access import get_cluster

    found = get_cluster(cluster)
    projects = budget_access.user_projects(request.user)
    form = ReservationForm(request.POST or None, projects=projects)
    return _file(request, form, Kind.RESERVATION, f"cluster {found.name}", cluster=found)


@login_required
def detail(request, pk):
    item = access.get_request_for_user(request.user, pk)
    return render(
        request,
        "exceptions/detail.html",
        {
            "item": item,
            "events": item.events.select_related("actor"),
            "actions": access.actions_for(request.user, item),
        },
    )


@require_POST
@login_required
def withdraw(request, pk):
    access.get_request_for_user(request.user, pk)
    try:
        services.withdraw_exception(request.user, pk)
    except ExceptionError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Exception #{pk} withdrawn.")
    return redirect("exception-detail", pk)
