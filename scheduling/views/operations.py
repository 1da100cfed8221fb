"""The operations page: utilisation, occupancy, wait times, preemptions, passes and drains;
node drain and undrain for cluster admins. Leadership may look; only admins act."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from scheduling import reports, services
from scheduling.access import get_node_for_admin
from scheduling.errors import JobError
from scheduling.forms import DrainForm
from scheduling.views import render_page

TEMPLATE = "scheduling/operations.html"


def _allowed(user) -> bool:
    from budgets.access import is_cluster_admin, is_leadership

    return is_cluster_admin(user) or is_leadership(user)


def _context(user, errors=None) -> dict:
    from budgets.access import is_cluster_admin

    return {
        **reports.operations_report(),
        "is_admin": is_cluster_admin(user),
        "errors": errors or {},
    }


@login_required
def operations(request):
    if not _allowed(request.user):
        raise PermissionDenied("The operations page is for cluster admins and leadership")
    partial = "nodes" if request.GET.get("part") == "nodes" else "stats"
    return render_page(request, TEMPLATE, partial, _context(request.user))


@login_required
@require_POST
def node_drain(request, pk):
    node = get_node_for_admin(request.user, pk)
    form = DrainForm(request.POST)
    drained = request.POST.get("action") != "undrain"
    try:
        reason = form.cleaned_data["reason"] if form.is_valid() else ""
        services.set_node_drain(request.user, node.pk, drained, reason)
    except JobError as exc:
        status = 200 if request.htmx else 400
        return render_page(
            request,
            TEMPLATE,
            "nodes",
            _context(request.user, {node.pk: exc.message}),
            status=status,
        )
    if request.htmx:  # the node's row shows the new state; no message to linger
        return render_page(request, TEMPLATE, "nodes", _context(request.user))
    messages.success(request, f"{node.name} {'drained' if drained else 'back in service'}.")
    return redirect("operations")
