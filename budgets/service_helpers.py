"""What the budget services share: the audit row every change writes, the tree's family
relations, the node lock that serialises changes within one family, and the grants in force."""

from decimal import Decimal, InvalidOperation

from django.conf import settings

from budgets.balances import with_grants
from budgets.errors import BudgetValidationError
from budgets.models import AuditEntry, BudgetNode

GRANT = "grant_gpu_hours"
CENT = Decimal("0.01")


def max_grant_gpu_hours() -> Decimal:
    """The cap on any one grant; anything above is a typo, not a budget."""
    return Decimal(getattr(settings, "ALLOT_MAX_GRANT_GPU_HOURS", 100_000_000))


def parse_gpu_hours(value, field: str = GRANT, *, allow_zero: bool = True) -> Decimal:
    try:
        amount = Decimal(str(value).strip().replace(",", "").replace("_", ""))
    except (InvalidOperation, ValueError):
        raise BudgetValidationError(field, f"“{value}” is not a number of GPU-hours.") from None
    if not amount.is_finite():
        raise BudgetValidationError(field, "Enter a finite number of GPU-hours.")
    if amount < 0:
        raise BudgetValidationError(field, "GPU-hours cannot be negative.")
    if amount == 0 and not allow_zero:
        raise BudgetValidationError(field, "Enter more than zero GPU-hours.")
    if amount > max_grant_gpu_hours():
        raise BudgetValidationError(
            field, f"{amount:,} GPU-hours is more than the cap of {max_grant_gpu_hours():,}."
        )
    return amount.quantize(CENT)


def _audit(actor, action, node, field, old, new, reason=""):
    return AuditEntry.objects.create(
        actor=actor if getattr(actor, "pk", None) else None,
        action=action,
        node=node,
        field=field,
        old="" if old is None else str(old),
        new="" if new is None else str(new),
        reason=reason or "",
    )


def _parent(node: BudgetNode) -> BudgetNode:
    return BudgetNode.objects.get(path=node.path[: -node.steplen])


def _children(node: BudgetNode):
    return BudgetNode.objects.filter(path__startswith=node.path, depth=node.depth + 1)


def _siblings(node: BudgetNode):
    return BudgetNode.objects.filter(path__startswith=node.path[: -node.steplen], depth=node.depth)


def _lock(node: BudgetNode) -> BudgetNode:
    """Lock and re-read a node: changes within one family of siblings are serialised by
    locking their parent, so two concurrent edits cannot together overspend it."""
    return BudgetNode.objects.select_for_update().get(pk=node.pk)


def _in_force(nodes, period) -> dict[int, tuple[Decimal, int]]:
    rows = with_grants(BudgetNode.objects.filter(pk__in=[n.pk for n in nodes]), period)
    return {
        pk: (Decimal(grant or 0).quantize(CENT), version or 0)
        for pk, grant, version in rows.values_list("pk", "grant_in_force", "grant_version")
    }
