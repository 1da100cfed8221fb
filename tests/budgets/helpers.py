"""Small helpers shared by the budget tests."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from budgets.models import AuditEntry, BudgetNode, Grant


def queries_to_get(client, url) -> int:
    """How many queries a successful GET of ``url`` costs."""
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def snapshot():
    """Everything a structure action could change: nodes, grants and the audit trail."""
    nodes = BudgetNode.objects.order_by("pk").values_list(
        "pk", "name", "slug", "slug_path", "path", "weight", "archived"
    )
    grants = Grant.objects.order_by("pk").values_list(
        "node", "period_start", "gpu_hours", "version"
    )
    return list(nodes), list(grants), AuditEntry.objects.count()


def role_cases(matrix: dict, actions) -> list:
    """(persona, action, expected) for each persona's row of ``matrix``, whose entries follow
    the order of ``actions``."""
    return [
        (who, action, codes[i]) for who, codes in matrix.items() for i, action in enumerate(actions)
    ]
