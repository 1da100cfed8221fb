"""Who may see which exception requests: the one choke point for pages and the API.

A request is visible to the person who asked, to everyone on its approval ladder, and to
whoever can see its scope in the budget tree (the program's manager, leadership). Cluster
admins see them all. A request with no scope (an unfunded job's protection) is also visible
to leadership on the root.
"""

from __future__ import annotations

from django.db.models import Q
from django.http import Http404

from budgets import access as budget_access
from core.parsing import parse_id
from exceptions import approvers
from exceptions.models import ExceptionRequest, State


def visible_requests(user):
    requests = ExceptionRequest.objects.all()
    if not user.is_authenticated:
        return requests.none()
    if budget_access.is_cluster_admin(user):
        return requests
    scope = Q(requester=user) | Q(scope__in=budget_access.visible_nodes(user).values("pk"))
    if approvers.leads_whole_tree(user):
        scope |= Q(scope__isnull=True)
    return requests.filter(scope)


def get_request_for_user(user, pk) -> ExceptionRequest:
    """The request with what its pages need, or Http404 when the user may not see it."""
    try:
        return visible_requests(user).for_list().select_related("scope").get(pk=parse_id(pk))
    except ExceptionRequest.DoesNotExist:
        raise Http404("No such exception") from None


def awaiting_decision(user):
    """Pending requests the user may decide, oldest first (the inbox). The ladder check is
    done in memory on the user's cached roles: a fixed number of queries per inbox."""
    pending = list(
        visible_requests(user)
        .pending()
        .for_list()
        .select_related("scope")
        .order_by("submitted_at", "pk")
    )
    return [
        r
        for r in pending
        if approvers.can_decide(user, r)
        and not any(a.approver_id == user.pk for a in r.approvals.all())
    ]


def actions_for(user, request) -> dict:
    pending = request.state == State.SUBMITTED
    decide = (
        pending
        and approvers.can_decide(user, request)
        and not any(a.approver_id == user.pk for a in request.approvals.all())
    )
    return {"decide": decide, "withdraw": pending and request.requester_id == user.pk}
