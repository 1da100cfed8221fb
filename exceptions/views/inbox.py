"""The approver's inbox: decide in place (htmx swaps the row), your own requests, your
notifications."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from exceptions import access, notifications, services
from exceptions.errors import ExceptionError
from exceptions.forms import DecisionForm


@login_required
def inbox(request):
    mine = access.visible_requests(request.user).filter(requester=request.user).for_list()[:50]
    context = {
        "awaiting": access.awaiting_decision(request.user),
        "mine": mine,
        "notes": notifications.recent(request.user),
        "unread": notifications.unread_count(request.user),
    }
    return render(request, "exceptions/inbox.html", context)


@require_POST
@login_required
def decide(request, pk):
    item = access.get_request_for_user(request.user, pk)
    form = DecisionForm(request.POST)
    error = None
    if not form.is_valid():
        error = "Choose approve or reject."
    else:
        try:
            if form.cleaned_data["decision"] == "approve":
                services.approve_exception(request.user, pk, comment=form.cleaned_data["reason"])
            else:
                services.reject_exception(request.user, pk, reason=form.cleaned_data["reason"])
        except ExceptionError as exc:
            error = exc.message
    if not request.htmx:
        if error:
            messages.error(request, error)
        return redirect("exception-inbox")
    item = access.get_request_for_user(request.user, pk)
    return render(
        request,
        "exceptions/inbox.html#decision-row",
        {"r": item, "error": error, "decided": error is None},
    )  # 200: htmx swaps it


@require_POST
@login_required
def mark_read(request):
    notifications.mark_read(request.user)
    return redirect("exception-inbox")
