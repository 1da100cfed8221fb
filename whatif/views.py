"""The what-if pages under /budgets/: the tree with an editable grant column ("Preview
changes"), "Simulate" with a live progress bar (htmx polling), the side-by-side result, and
"Apply" through the budget services or "Discard". Plain form posts and links work without
htmx; htmx swaps fragments (``{% partialdef %}``)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect, reswap, retarget

from budgets.errors import BudgetError
from budgets.views.tree import tree_context
from whatif import compare, proposal, services
from whatif.api import preview_for

PAGE, RESULT = "whatif/preview.html", "whatif/result.html"
PREFIX = "grant:"


def _form_context(user, typed=None, error=None, weeks=4) -> dict:
    context = tree_context(user)
    typed = typed or {}
    for row in context["rows"]:
        path = row["s"].node.slug_path
        row["editable"] = row["editable"] and row["s"].node.depth > 1
        row["typed"] = typed.get(path)
    return {**context, "error": error, "weeks": weeks}


@login_required
def preview_page(request):
    if not proposal.may_preview(request.user):
        raise PermissionDenied("Only leadership and managers can preview grant changes.")
    context = _form_context(request.user)
    return render(request, f"{PAGE}#preview-form" if request.htmx else PAGE, context)


@login_required
@require_POST
def simulate(request):
    typed = {k[len(PREFIX) :]: v for k, v in request.POST.items() if k.startswith(PREFIX)}
    weeks = request.POST.get("weeks", "4")
    try:
        preview = services.request_preview(request.user, weeks, typed)
    except (BudgetError, proposal.ScopeError, services.TooManyPreviews) as error:
        context = _form_context(request.user, typed, error, weeks)
        if request.htmx:  # the form itself comes back, with the error in place
            response = render(request, f"{PAGE}#preview-form", context)
            return reswap(retarget(response, "#budget-tree"), "outerHTML")
        refused = 429 if isinstance(error, services.TooManyPreviews) else 400
        return render(request, PAGE, context, status=refused)
    if request.htmx:
        return render(request, f"{RESULT}#status", _status_context(request, preview))
    return redirect("whatif-page-detail", pk=preview.pk)


def _status_context(request, preview, apply_error=None) -> dict:
    result = proposal.visible_result(request.user, preview.result)
    context = {"preview": preview, "apply_error": apply_error, "percent": preview.progress * 100}
    if preview.status == preview.Status.DONE and result:
        context.update(
            rows=compare.node_rows(result),
            summary=compare.summary_rows(result),
            chart=compare.chart_svg(result),
        )
    return context


@login_required
def preview_detail(request, pk):
    preview = preview_for(request.user, pk)
    context = _status_context(request, preview)
    return render(request, f"{RESULT}#status" if request.htmx else RESULT, context)


@login_required
@require_POST
def apply(request, pk):
    preview = preview_for(request.user, pk)
    try:
        changed = services.apply_proposal(request.user, preview)
    except (BudgetError, proposal.ScopeError) as error:
        context = _status_context(request, preview, apply_error=error)
        if request.htmx:
            return render(request, f"{RESULT}#status", context)
        return render(request, RESULT, context, status=400)
    messages.success(request, f"Applied the proposed grants: {', '.join(changed) or 'none'}.")
    if request.htmx:
        return HttpResponseClientRedirect(reverse("budget-tree"))
    return redirect("budget-tree")
