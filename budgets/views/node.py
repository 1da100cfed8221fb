"""One node: its numbers, children, audit history and burn-down (page and JSON)."""

from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
from django.shortcuts import render

from budgets import access
from budgets.balances import tree_stats
from budgets.charts import burndown, burndown_svg

HISTORY_LIMIT = 100


@login_required
def node_detail(request, pk):
    node = access.get_node_for_user(request.user, pk)
    stats = tree_stats()
    children = [
        s
        for s in stats.values()
        if s.node.path.startswith(node.path) and s.node.depth == node.depth + 1
    ]
    data = burndown(node)
    return render(
        request,
        "budgets/node.html",
        {
            "node": node,
            "s": stats[node.pk],
            "children": children,
            "editable": access.can_edit_grant(request.user, node),
            "history": node.audit.select_related("actor")[:HISTORY_LIMIT],
            "chart": burndown_svg(data),
        },
    )


@login_required
def node_burndown(request, pk):
    node = access.get_node_for_user(request.user, pk)
    return JsonResponse(burndown(node))
