"""The leadership budgeting page: the tree, inline grant editing and sibling transfers.

One URL, two renderings: the full page, or (for htmx) just the `tree-table` partial, which
carries the table and the transfer form so shares everywhere update after any change.
Without htmx the forms post normally and redirect back (or re-render with the error).
"""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from budgets import access, forms, services
from budgets.balances import tree_stats
from budgets.errors import BudgetError, BudgetValidationError, ConflictError
from budgets.periods import BudgetPeriod
from core.parsing import parse_int

TEMPLATE = "budgets/tree.html"


def tree_context(user, *, errors=None, typed=None, transfer=None) -> dict:
    """Rows for every node the user may see, with their numbers: a fixed number of queries."""
    period = BudgetPeriod.current()
    stats = tree_stats(period)
    rows = [
        {"s": s, "editable": access.can_edit_grant(user, s.node)}
        for s in stats.values()
        if access.can_see(user, s.node)
    ]
    top = min((r["s"].node.depth for r in rows), default=1)
    for r in rows:
        r["indent"] = r["s"].node.depth - top
        r["error"] = (errors or {}).get(r["s"].node.pk)
        r["typed"] = (typed or {}).get(r["s"].node.pk)
    return {
        "period": period,
        "rows": rows,
        "transferable": [r["s"].node for r in rows if r["editable"] and r["s"].node.depth > 1],
        "transfer": transfer or {},
    }


def _respond(request, context, status=200):
    if request.htmx:
        # htmx swaps only 2xx responses by default; the error is in the fragment itself.
        return render(request, f"{TEMPLATE}#tree-table", context)
    return render(request, TEMPLATE, context, status=status)


@login_required
def budget_tree(request):
    return render(request, TEMPLATE, tree_context(request.user))


@login_required
@require_POST
def set_grant(request, pk):
    node = access.get_node_for_user(request.user, pk, write=True)
    data = {k: request.POST.get(k, "") for k in ("grant_gpu_hours", "version", "reason")}
    value = data["grant_gpu_hours"]
    try:
        if refusal := forms.too_long(data):
            raise BudgetValidationError(*refusal)
        services.set_grant(
            request.user,
            node,
            value,
            expected_version=parse_int(data["version"], minimum=0),
            reason=data["reason"],
        )
    except BudgetError as error:
        context = tree_context(
            request.user, errors={node.pk: error.message}, typed={node.pk: value}
        )
        return _respond(request, context, status=409 if isinstance(error, ConflictError) else 400)
    if request.htmx:
        return _respond(request, tree_context(request.user))
    messages.success(request, f"Grant of {node.label} saved.")
    return redirect("budget-tree")


@login_required
@require_POST
def transfer(request):
    data = {k: request.POST.get(k, "") for k in ("source", "target", "gpu_hours", "reason")}
    try:
        if refusal := forms.too_long(data):
            raise BudgetValidationError(*refusal)
        source = access.get_node_for_user(request.user, data["source"], write=True)
        target = access.get_node_for_user(request.user, data["target"], write=True)
        services.transfer_gpu_hours(
            request.user, source, target, data["gpu_hours"], reason=data["reason"]
        )
    except BudgetError as error:
        data["error"] = error.message
        return _respond(request, tree_context(request.user, transfer=data), status=400)
    if request.htmx:
        return _respond(request, tree_context(request.user, transfer={"done": data}))
    messages.success(request, f"Moved {data['gpu_hours']} GPU-hours to {target.label}.")
    return redirect("budget-tree")
