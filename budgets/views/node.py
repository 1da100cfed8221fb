"""One node: its numbers, children, audit history, burn-down (page and JSON), and the forms
that change its place in the tree (their views are in `budgets.views.structure`)."""

from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
from django.shortcuts import render

from budgets import access
from budgets.balances import tree_stats
from budgets.charts import burndown, burndown_svg
from budgets.forms import move_targets
from budgets.models import AuditEntry

HISTORY_LIMIT = 100
TEMPLATE = "budgets/node.html"
# The inputs of each form on the page; an error on any other field shows under the form.
FORM_INPUTS = {
    "rename": ["name", "slug", "reason"],
    "weight": ["weight", "reason"],
    "child": ["name", "slug", "grant_gpu_hours", "reason"],
    "move": ["parent", "reason"],
    "archive": ["reason"],
}


def _forms(node, submitted=None) -> dict:
    """Each form's values (what was typed, after a refusal) and its error, if any."""
    initial = {
        "rename": {"name": node.name, "slug": node.slug},
        "weight": {"weight": "" if node.weight is None else f"{node.weight.normalize():f}"},
    }
    forms = {
        name: {"inputs": inputs, "data": initial.get(name, {}), "field": None, "message": None}
        for name, inputs in FORM_INPUTS.items()
    }
    if submitted:
        forms[submitted["form"]].update(submitted)
    return forms


def _history(node):
    """The audit trail of the node and everything below it, so a child created, moved in or
    archived here shows on this page too (the API's /history/ keeps to the node itself)."""
    subtree = AuditEntry.objects.filter(node__path__startswith=node.path)
    return subtree.select_related("actor", "node")[:HISTORY_LIMIT]


def node_context(user, node, *, submitted=None, notice=None) -> dict:
    """Everything the page shows, in a fixed number of queries: children and the move
    choices come from the one tree_stats() read, whatever the number of nodes."""
    stats = tree_stats()
    children = [
        s
        for s in stats.values()
        if s.node.path.startswith(node.path) and s.node.depth == node.depth + 1
    ]
    editable = access.can_edit_grant(user, node)
    shown = {
        "rename": editable,
        "weight": editable,
        "child": access.can_manage_structure(user, node),
    }
    shown["move"] = shown["archive"] = editable and not node.is_root()
    # A refusal for a form the page does not offer (a crafted post) shows at the top.
    stray = submitted if submitted and not shown[submitted["form"]] else None
    return {
        "node": node,
        "s": stats[node.pk],
        "children": children,
        "editable": editable,
        "can_add_child": shown["child"],
        "can_restructure": shown["move"],
        "move_targets": move_targets(user, node, [s.node for s in stats.values()])
        if shown["move"]
        else [],
        "stray": stray,
        "forms": _forms(node, submitted),
        "notice": notice,
        "history": _history(node),
        "chart": burndown_svg(burndown(node)),
    }


def render_node(request, node, *, status=200, submitted=None, notice=None):
    """One URL, two renderings: the page, or (for htmx) its `node-body` partial. htmx swaps
    only 2xx answers, so a refusal it asked for comes back 200 with the error inside."""
    context = node_context(request.user, node, submitted=submitted, notice=notice)
    if request.htmx:
        return render(request, f"{TEMPLATE}#node-body", context)
    return render(request, TEMPLATE, context, status=status)


@login_required
def node_detail(request, pk):
    return render_node(request, access.get_node_for_user(request.user, pk))


@login_required
def node_burndown(request, pk):
    node = access.get_node_for_user(request.user, pk)
    return JsonResponse(burndown(node))
