"""The node page's forms that change the tree: rename, weight, add a child, move, archive.

Thin views: authorise through `budgets.access`, call one service (or `budgets.forms` for a
child and its grant), render. A refusal re-renders the page (or, for htmx, its `node-body`
partial) with the message beside the field at fault and what was typed kept; success
redirects back (plain post) or returns the updated partial, history included (htmx).
"""

from functools import wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from budgets import access, forms, services
from budgets.errors import BudgetError, BudgetValidationError
from budgets.models import BudgetNode
from budgets.views.node import render_node


def _refused(request, node, form, data, field, message, status=400):
    submitted = {"form": form, "data": data, "field": field, "message": message}
    return render_node(request, node, status=status, submitted=submitted)


def _done(request, node, notice):
    if request.htmx:
        return render_node(request, node, notice=notice)
    messages.success(request, notice)
    return redirect("budget-node", node.pk)


def _editable_node(user, pk):
    return access.get_node_for_user(user, pk, write=True)


def _parent_for_child(user, pk):
    parent = access.get_node_for_user(user, pk)
    if not access.can_manage_structure(user, parent):
        raise PermissionDenied("You cannot add nodes here")
    return parent


def _node_form(form, *fields, authorise=_editable_node):
    """One of the node page's forms: a signed-in POST for the node ``authorise`` returns. The
    action gets the node and the posted ``fields``, stripped; a value too long, or a
    BudgetError the action raises, re-renders the page with the message beside its field."""

    def decorate(action):
        @login_required
        @require_POST
        @wraps(action)
        def view(request, pk):
            node = authorise(request.user, pk)
            data = {f: request.POST.get(f, "").strip() for f in fields}
            try:
                if refusal := forms.too_long(data):
                    raise BudgetValidationError(*refusal)
                return action(request, node, data)
            except BudgetError as error:
                return _refused(request, node, form, data, error.field, error.message)

        return view

    return decorate


@_node_form("rename", "name", "slug", "reason")
def rename(request, node, data):
    node = forms.change_node(
        request.user, node, name=data["name"], slug=data["slug"], reason=data["reason"]
    )
    return _done(request, node, f"Renamed to {node.name} ({node.label}).")


@_node_form("weight", "weight", "reason")
def set_weight(request, node, data):
    node = services.set_weight(request.user, node, data["weight"], reason=data["reason"])
    cleared = node.weight is None
    return _done(request, node, "Weight cleared." if cleared else f"Weight set to {node.weight}.")


@_node_form("child", "name", "slug", "grant_gpu_hours", "reason", authorise=_parent_for_child)
def add_child(request, parent, data):
    child = forms.create_child(request.user, parent, **data)
    return _done(request, parent, f"Created {child.label}.")


@_node_form("move", "parent", "reason")
def move(request, node, data):
    if not data["parent"]:
        return _refused(request, node, "move", data, "parent", "Choose where to move it.")
    try:
        parent = access.get_node_for_user(request.user, data["parent"])
    except Http404:
        return _refused(request, node, "move", data, "parent", "No such budget node.", 404)
    if not access.can_manage_structure(request.user, parent):
        message = f"You cannot add nodes under {parent.label}."
        return _refused(request, node, "move", data, "parent", message, 403)
    services.move_node(request.user, node, parent, reason=data["reason"])
    node.refresh_from_db()  # move_node rewrites slug paths in bulk, not on this object
    return _done(request, node, f"Moved to {node.label}.")


@_node_form("archive", "reason")
def archive(request, node, data):
    parent = BudgetNode.objects.get_parent(node)
    services.archive_node(request.user, node, reason=data["reason"])
    # An archived node has no page any more: go to its parent, where it no longer shows.
    where = reverse("budget-node", args=[parent.pk]) if parent else reverse("budget-tree")
    messages.success(request, f"Archived {node.label}.")
    if request.htmx:
        return HttpResponseClientRedirect(where)
    return redirect(where)
