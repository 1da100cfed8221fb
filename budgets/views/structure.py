"""The node page's forms that change the tree: rename, weight, add a child, move, archive.

Thin views: authorise through `budgets.access`, call one service (or `budgets.forms` for a
child and its grant), render. A refusal re-renders the page (or, for htmx, its `node-body`
partial) with the message beside the field at fault and what was typed kept; success
redirects back (plain post) or returns the updated partial, history included (htmx).
"""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from budgets import access, forms, services
from budgets.errors import BudgetError
from budgets.models import BudgetNode
from budgets.views.node import render_node


def _posted(request, *fields) -> dict:
    return {f: request.POST.get(f, "").strip() for f in fields}


def _refused(request, node, form, data, field, message, status=400):
    submitted = {"form": form, "data": data, "field": field, "message": message}
    return render_node(request, node, status=status, submitted=submitted)


def _done(request, node, notice):
    if request.htmx:
        return render_node(request, node, notice=notice)
    messages.success(request, notice)
    return redirect("budget-node", node.pk)


@login_required
@require_POST
def rename(request, pk):
    node = access.get_node_for_user(request.user, pk, write=True)
    data = _posted(request, "name", "slug", "reason")
    if refusal := forms.too_long(data):
        return _refused(request, node, "rename", data, *refusal)
    try:
        node = forms.change_node(
            request.user, node, name=data["name"], slug=data["slug"], reason=data["reason"]
        )
    except BudgetError as error:
        return _refused(request, node, "rename", data, error.field, error.message)
    return _done(request, node, f"Renamed to {node.name} ({node.label}).")


@login_required
@require_POST
def set_weight(request, pk):
    node = access.get_node_for_user(request.user, pk, write=True)
    data = _posted(request, "weight", "reason")
    if refusal := forms.too_long(data):
        return _refused(request, node, "weight", data, *refusal)
    try:
        node = services.set_weight(request.user, node, data["weight"], reason=data["reason"])
    except BudgetError as error:
        return _refused(request, node, "weight", data, error.field, error.message)
    cleared = node.weight is None
    return _done(request, node, "Weight cleared." if cleared else f"Weight set to {node.weight}.")


@login_required
@require_POST
def add_child(request, pk):
    parent = access.get_node_for_user(request.user, pk)
    if not access.can_manage_structure(request.user, parent):
        raise PermissionDenied("You cannot add nodes here")
    data = _posted(request, "name", "slug", "grant_gpu_hours", "reason")
    if refusal := forms.too_long(data):
        return _refused(request, parent, "child", data, *refusal)
    try:
        child = forms.create_child(request.user, parent, **data)
    except BudgetError as error:
        return _refused(request, parent, "child", data, error.field, error.message)
    return _done(request, parent, f"Created {child.label}.")


@login_required
@require_POST
def move(request, pk):
    node = access.get_node_for_user(request.user, pk, write=True)
    data = _posted(request, "parent", "reason")
    if refusal := forms.too_long(data):
        return _refused(request, node, "move", data, *refusal)
    if not data["parent"]:
        return _refused(request, node, "move", data, "parent", "Choose where to move it.")
    try:
        parent = access.get_node_for_user(request.user, data["parent"])
    except Http404:
        return _refused(request, node, "move", data, "parent", "No such budget node.", 404)
    if not access.can_manage_structure(request.user, parent):
        message = f"You cannot add nodes under {parent.label}."
        return _refused(request, node, "move", data, "parent", message, 403)
    try:
        services.move_node(request.user, node, parent, reason=data["reason"])
    except BudgetError as error:
        return _refused(request, node, "move", data, error.field, error.message)
    node.refresh_from_db()  # move_node rewrites slug paths in bulk, not on this object
    return _done(request, node, f"Moved to {node.label}.")


@login_required
@require_POST
def archive(request, pk):
    node = access.get_node_for_user(request.user, pk, write=True)
    data = _posted(request, "reason")
    if refusal := forms.too_long(data):
        return _refused(request, node, "archive", data, *refusal)
    try:
        parent = BudgetNode.objects.get_parent(node)
        services.archive_node(request.user, node, reason=data["reason"])
    except BudgetError as error:
        return _refused(request, node, "archive", data, error.field, error.message)
    # An archived node has no page any more: go to its parent, where it no longer shows.
    where = reverse("budget-node", args=[parent.pk]) if parent else reverse("budget-tree")
    messages.success(request, f"Archived {node.label}.")
    if request.htmx:
        return HttpResponseClientRedirect(where)
    return redirect(where)
