"""What one hour of each GPU type costs, in H100-equivalent GPU-hours.

A price change reprices every budget's future spending, so it is a governance change like a
grant: one atomic service writing its audit row on the organisation's root, where leadership
reads the whole tree's history.
"""

from decimal import Decimal, InvalidOperation

from django.db import transaction

from budgets.errors import BudgetValidationError
from budgets.models import AuditAction, BudgetNode, GpuType
from budgets.service_helpers import _audit

COST_FACTOR = "cost_factor"
STEP = Decimal("0.001")  # the column's three decimal places
MAX_COST_FACTOR = Decimal("999.999")  # the column's six digits
NAME_LENGTH = GpuType._meta.get_field("name").max_length


def parse_cost_factor(value, field: str = COST_FACTOR) -> Decimal:
    """A positive number with at most three decimals; never rounded, so a typo is refused
    rather than priced at something nobody wrote."""
    try:
        factor = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        raise BudgetValidationError(field, f"{value!r} is not a number (e.g. 1.5)") from None
    if not factor.is_finite():
        raise BudgetValidationError(field, "a cost factor must be a finite number")
    if factor <= 0:
        raise BudgetValidationError(field, f"{value!r}: a cost factor must be above 0")
    if factor > MAX_COST_FACTOR:
        raise BudgetValidationError(field, f"{value!r}: a cost factor is at most {MAX_COST_FACTOR}")
    if factor != factor.quantize(STEP):
        raise BudgetValidationError(field, f"{value!r}: at most three decimal places")
    return factor.quantize(STEP)


def parse_gpu_type_name(value, field: str = "gpu_type") -> str:
    name = str(value).strip()
    if not name:
        raise BudgetValidationError(field, "name the GPU type")
    if len(name) > NAME_LENGTH:
        raise BudgetValidationError(field, f"a GPU type's name is at most {NAME_LENGTH} characters")
    return name


@transaction.atomic
def set_gpu_price(actor, name, cost_factor, *, reason: str = "") -> GpuType:
    """Create or reprice a GPU type and audit it on the root; the same price again writes
    nothing. Needs the organisation's root: its audit trail is where the change is kept."""
    name = parse_gpu_type_name(name)
    factor = parse_cost_factor(cost_factor)
    root = BudgetNode.objects.get_root_nodes().first()
    if root is None:
        raise BudgetValidationError(
            "gpu_type",
            "the organisation has no budget tree yet: create its root first "
            "(prices are audited there)",
        )
    row = GpuType.objects.select_for_update().filter(name=name).first()
    old = None if row is None else str(row)
    if row is None:
        row = GpuType.objects.create(name=name, cost_factor=factor)
    elif row.cost_factor == factor:
        return row
    else:
        row.cost_factor = factor
        row.save(update_fields=["cost_factor"])
    _audit(actor, AuditAction.SET_PRICE, root, COST_FACTOR, old, str(row), reason)
    return row
