"""Reading and checking a proposal: who may propose what, and whether the tree it makes holds.

Errors are ``BudgetError``s naming the field — ``weeks``, ``grants``, or ``grants.<path>`` for
one entry — so the API answers ``{"message", "field"}`` and the page shows it in place.
"""

from __future__ import annotations

from decimal import Decimal

from django.core.exceptions import PermissionDenied

from budgets import access
from budgets.errors import BudgetValidationError
from budgets.models import BudgetNode
from budgets.services import parse_gpu_hours

MAX_WEEKS = 12


class ScopeError(PermissionDenied):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field, self.message = field, message


def may_preview(user) -> bool:
    """Leadership, program managers and project leads: whoever can set some grant."""
    return any(role in {"leadership", *access.EDITING_BELOW} for role, _ in access._roles(user))


def parse_weeks(value) -> int:
    try:
        weeks = int(str(value).strip())
    except (TypeError, ValueError):
        raise BudgetValidationError("weeks", f"“{value}” is not a whole number of weeks.") from None
    if not 1 <= weeks <= MAX_WEEKS:
        raise BudgetValidationError("weeks", f"Choose between 1 and {MAX_WEEKS} weeks.")
    return weeks


def parse_proposal(user, grants, current: dict[str, float]) -> dict[str, str]:
    """The proposal as path -> GPU-hours (exact decimal strings), entries equal to the
    current grant dropped. Every path must be a node the user may set the grant of."""
    if not may_preview(user):
        raise ScopeError("grants", "Only leadership and managers can preview grant changes.")
    if not isinstance(grants, dict):
        raise BudgetValidationError("grants", "Give the proposed grants as {path: GPU-hours}.")
    nodes = {
        n.slug_path: n
        for n in BudgetNode.objects.filter(slug_path__in=[str(p) for p in grants], archived=False)
    }
    proposal: dict[str, str] = {}
    for path, value in grants.items():
        field = f"grants.{path}"
        node = nodes.get(str(path))
        if node is None or node.depth == 1 or not access.can_see(user, node):
            raise BudgetValidationError(field, f"There is no budget node “{path}” you can see.")
        if not access.can_edit_grant(user, node):
            raise ScopeError(field, f"You cannot change the grant of {path}.")
        amount = parse_gpu_hours(value, field)
        if amount != Decimal(str(current.get(path, 0))).quantize(amount):
            proposal[node.slug_path] = str(amount)
    check_tree(proposal, current)
    return dict(sorted(proposal.items()))


def check_tree(proposal: dict[str, str], current: dict[str, float]) -> None:
    """As the budget services would: a node's children may not hold more than it does."""
    merged = {p: Decimal(str(v)) for p, v in current.items()}
    merged.update({p: Decimal(v) for p, v in proposal.items()})
    children: dict[str, Decimal] = {}
    for path, amount in merged.items():
        parent = path.rpartition("/")[0]
        if parent in merged:
            children[parent] = children.get(parent, Decimal(0)) + amount
    for path in sorted(proposal):
        parent = path.rpartition("/")[0]
        if parent in merged and children[parent] > merged[parent]:
            raise BudgetValidationError(
                f"grants.{path}",
                f"{parent}'s children would hold {children[parent]:,} GPU-hours but it holds "
                f"{merged[parent]:,}: raise {parent} in the same proposal, or lower a sibling.",
            )
        if children.get(path, 0) > merged[path]:
            raise BudgetValidationError(
                f"grants.{path}",
                f"{path}'s children hold {children[path]:,} GPU-hours; "
                "its grant cannot be less than that.",
            )


def visible_result(user, result: dict | None) -> dict | None:
    """The result with only the projects the viewer may see (a manager's preview replays the
    whole organisation, but shows them their programs)."""
    if not result or access.is_cluster_admin(user):
        return result
    seen = set(access.visible_nodes(user).values_list("slug_path", flat=True))
    out = {}
    for side, data in result.items():
        data = dict(data)
        data["projects"] = {p: v for p, v in data.get("projects", {}).items() if p in seen}
        out[side] = data
    return out
