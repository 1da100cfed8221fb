"""What the structure forms submit — on the node page and through the API — applied through
the services.

A form may carry several changes at once (a new child and its grant; a rename, a weight and a
grant in one PATCH). Each service is atomic on its own; here they run inside one more
transaction, so a refusal of the last change undoes the first and nothing is half-done.
Errors are the services' own `BudgetError(field, message)`.
"""

from django.db import transaction

from budgets import access, services
from budgets.models import BudgetNode

UNSET = object()
# The longest value each posted field may have (the pages read raw POST data; the API's
# serializers carry the same limits). Names and slugs are the services' to check.
LIMITS = {
    "reason": 1000,
    "grant_gpu_hours": 40,
    "gpu_hours": 40,
    "weight": 40,
    "parent": 20,
    "source": 20,
    "target": 20,
    "version": 20,
    "name": 1000,
    "slug": 1000,
}


def too_long(data: dict) -> tuple[str, str] | None:
    """(field, message) for the first posted value over its limit, or None."""
    for field, value in data.items():
        limit = LIMITS.get(field)
        if limit is not None and len(value or "") > limit:
            return field, f"{field}: keep it under {limit} characters."
    return None


def _given(value) -> bool:
    return value is not UNSET and value is not None and str(value).strip() != ""


@transaction.atomic
def create_child(actor, parent, *, name, slug=None, grant_gpu_hours=None, reason="") -> BudgetNode:
    """Create a node under `parent` and, when given, set its first grant."""
    node = services.create_node(actor, parent, name, slug or None, reason=reason)
    if _given(grant_gpu_hours):
        services.set_grant(actor, node, grant_gpu_hours, reason=reason)
    return node


@transaction.atomic
def change_node(
    actor,
    node,
    *,
    name=UNSET,
    slug=UNSET,
    weight=UNSET,
    grant_gpu_hours=UNSET,
    version=None,
    reason="",
) -> BudgetNode:
    """Rename, re-slug, re-weight (None clears) and re-grant a node: whichever are given."""
    if name is not UNSET or _given(slug):
        node = services.rename_node(
            actor,
            node,
            node.name if name is UNSET else name,
            slug=slug if _given(slug) else None,
            reason=reason,
        )
        node.refresh_from_db()  # rename_node rewrites slug paths in bulk, not on this object
    if weight is not UNSET:
        node = services.set_weight(actor, node, weight, reason=reason)
    if grant_gpu_hours is not UNSET:
        services.set_grant(actor, node, grant_gpu_hours, expected_version=version, reason=reason)
    return node


def move_targets(user, node, nodes) -> list[BudgetNode]:
    """The parents `node` could move under, for the page's select: active nodes the user may
    add children to, outside the node's own subtree, other than its current parent. `nodes`
    are already loaded (the page's tree stats), so this costs no query."""
    parent_path = node.path[: -node.steplen]
    return [
        n
        for n in nodes
        if not n.path.startswith(node.path)
        and n.path != parent_path
        and access.can_manage_structure(user, n)
    ]
