"""The budgets panel on the home page: a researcher's projects and their balances, or, for
those who oversee budgets, the nodes they hold a role on."""

from budgets import access
from budgets.balances import balances
from budgets.models import BudgetNode
from budgets.periods import BudgetPeriod


def home_panel(user):
    period = BudgetPeriod.current()
    nodes = list(access.user_projects(user))
    title, label = "Your projects", "Project"
    if not nodes:
        paths = access.role_paths(user)
        nodes = list(BudgetNode.objects.filter(path__in=paths, archived=False).order_by("path"))
        title, label = "Budgets you oversee", "Node"
    if not nodes:
        return None
    stats = balances(nodes, period)
    return {
        "title": f"{title} · {period.label}",
        "template": "budgets/panel.html",
        "context": {"rows": [stats[n.pk] for n in nodes], "period": period, "label": label},
    }
