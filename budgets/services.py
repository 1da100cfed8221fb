"""Every change to the budget tree goes through here: one atomic function per action, each
writing its audit row in the same transaction, so a change and its record commit together.

Services trust their caller on *who* may act (views and the API check scope through
`budgets.access` first) and check *what* is valid themselves, raising `BudgetValidationError`
or `ConflictError` with the field at fault before anything is written.

Grants live here; the tree's shape (create, rename, move, archive, weights) in
`budgets.structure`, the shared helpers in `budgets.service_helpers`, the ledger services
(charging usage, liens) in `budgets.ledger`: all are re-exported here.
"""

from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models import F

from budgets.balances import committed_gpu_hours
from budgets.errors import (
    BudgetValidationError,
    ConflictError,
    InsufficientFunds,  # noqa: F401 (re-export)
)
from budgets.ledger import charge_usage, hold_lien, release_lien  # noqa: F401 (re-export)
from budgets.models import AuditAction, BudgetNode, Grant
from budgets.periods import BudgetPeriod
from budgets.prices import set_gpu_price  # noqa: F401 (re-export)
from budgets.service_helpers import (  # noqa: F401 (_in_force, parse_gpu_hours re-exported)
    CENT,
    GRANT,
    _audit,
    _children,
    _in_force,
    _lock,
    _parent,
    _siblings,
    parse_gpu_hours,
)
from budgets.structure import (  # noqa: F401 (re-export: one entry point for every change)
    archive_node,
    create_node,
    create_root,
    move_node,
    rename_node,
    set_weight,
)


def _family(node: BudgetNode, period):
    """Grants in force for the node, its parent, its active siblings and active children."""
    parent = None if node.is_root() else _parent(node)
    siblings = list(_siblings(node).filter(archived=False)) if parent else [node]
    children = list(_children(node).filter(archived=False))
    grants = _in_force([node, *siblings, *children, *([parent] if parent else [])], period)
    return parent, siblings, children, grants


def _write_grant(node, period, current_version, amount) -> Grant:
    """Write the grant for `period` if its version is still `current_version`.

    A conditional UPDATE (… WHERE version = n) and a row count check, or an INSERT guarded by
    the one-row-per-period constraint: either way a concurrent writer makes this fail loudly.
    """
    row = Grant.objects.filter(node=node, period_start=period.start).first()
    if row is not None:
        updated = Grant.objects.filter(pk=row.pk, version=current_version).update(
            gpu_hours=amount, version=F("version") + 1
        )
        if updated != 1:
            raise _conflict(node)
        row.refresh_from_db()
        return row
    try:
        with transaction.atomic():
            return Grant.objects.create(
                node=node, period_start=period.start, gpu_hours=amount, version=current_version + 1
            )
    except IntegrityError:
        raise _conflict(node) from None


def _conflict(node, current=None) -> ConflictError:
    now = f" (now {current[0]:,} GPU-hours)" if current else ""
    return ConflictError(
        GRANT,
        f"The grant of {node.label} was changed by someone else{now}. "
        "Reload to see the new value, then try again.",
        current_version=current[1] if current else None,
    )


@transaction.atomic
def set_grant(
    actor, node, gpu_hours, *, expected_version=None, reason="", period=None, count_liens=True
) -> Grant:
    """Set a node's grant for a period (the current one by default).

    The grant must fit in what the parent holds beside the other children, and must still
    cover what the node's own children hold; a cut must also still cover what the node (with
    its subtree) has spent this period plus what its running jobs' open liens hold, so no
    balance goes below zero. `expected_version` is the version the caller
    saw; if someone changed the grant since, a ConflictError names the field.

    ``count_liens=False`` is for a period's rollover only (a temporary top-up ending): the
    new period's grant is what was decided for it, as if set in advance, where open liens do
    not count; the caller states the consequence when they exceed it.
    """
    period = period or BudgetPeriod.current()
    amount = parse_gpu_hours(gpu_hours)
    node = _lock(node)
    if not node.is_root():
        _lock(_parent(node))
    parent, siblings, children, grants = _family(node, period)
    old, version = grants[node.pk]
    if expected_version is not None and int(expected_version) != version:
        raise _conflict(node, grants[node.pk])
    _check_fits_parent(node, parent, siblings, grants, amount)
    held_by_children = sum((grants[c.pk][0] for c in children), Decimal("0"))
    if amount < held_by_children:
        raise BudgetValidationError(
            GRANT,
            f"{node.label}'s children already hold {held_by_children:,} GPU-hours; "
            f"the grant cannot be less than that.",
        )
    if amount < old:
        _check_covers_commitments(node, period, amount, GRANT, count_liens=count_liens)
    if amount == old:
        in_force = Grant.objects.filter(node=node, period_start__lte=period.start)
        current = in_force.order_by("-period_start").first()
        if current is not None:
            return current
        # A node that never had a grant holds 0 by default; setting 0 records it.
    row = _write_grant(node, period, version, amount)
    _audit(actor, AuditAction.SET_GRANT, node, GRANT, old, amount, reason)
    return row


def _check_covers_commitments(node, period, amount, field, *, leaving=None, count_liens=True):
    """A cut may not go below what was charged this period plus what open liens hold: the
    running jobs' protected windows were promised against this balance (Slurm's association
    limits and ColdFront's allocations refuse a cut under usage the same way). `leaving` is
    the amount of a transfer, whose message speaks of what can leave the node."""
    used, held = committed_gpu_hours(node, period)
    held = held if count_liens else Decimal("0")
    minimum = used + held
    if amount >= minimum:
        return
    spent = f"{node.label} has used {used:,} GPU-hours in {period.label}"
    if held:
        spent += f" and open liens of its running jobs hold {held:,} more"
    if leaving is not None:
        can_leave = max(amount + leaving - minimum, Decimal("0"))
        raise BudgetValidationError(field, f"{spent}; at most {can_leave:,} can leave it.")
    raise BudgetValidationError(
        field, f"{spent}; the grant cannot be cut below {minimum:,} GPU-hours."
    )


def _check_fits_parent(node, parent, siblings, grants, amount):
    if parent is None:
        return
    others = sum((grants[s.pk][0] for s in siblings if s.pk != node.pk), Decimal("0"))
    available = grants[parent.pk][0] - others
    if amount > available:
        raise BudgetValidationError(
            GRANT,
            f"Exceeds the grant of {parent.label}: it holds {grants[parent.pk][0]:,} GPU-hours "
            f"and its other children hold {others:,}, so at most {max(available, 0):,} "
            f"is available.",
        )


@transaction.atomic
def transfer_gpu_hours(actor, source, target, gpu_hours, *, reason="", period=None):
    """Move GPU-hours from one node's grant to a sibling's, as one action.

    The parent's total is unchanged, so only the source needs checking: it must hold the
    amount and still cover its own children afterwards.
    """
    period = period or BudgetPeriod.current()
    amount = parse_gpu_hours(gpu_hours, "gpu_hours", allow_zero=False)
    if source.pk == target.pk:
        raise BudgetValidationError("target", "Choose a different node to transfer to.")
    source, target = _lock(source), _lock(target)
    if source.is_root() or source.path[: -source.steplen] != target.path[: -target.steplen]:
        raise BudgetValidationError("target", "GPU-hours move only between siblings.")
    if target.archived or source.archived:
        raise BudgetValidationError("target", "Archived nodes hold no grants.")
    children = list(_children(source).filter(archived=False))
    grants = _in_force([source, target, *children], period)
    (src_old, src_version), (dst_old, dst_version) = grants[source.pk], grants[target.pk]
    if amount > src_old:
        raise BudgetValidationError(
            "gpu_hours", f"{source.label} holds only {src_old:,} GPU-hours to transfer."
        )
    held = sum((grants[c.pk][0] for c in children), Decimal("0"))
    if src_old - amount < held:
        raise BudgetValidationError(
            "gpu_hours",
            f"{source.label}'s children hold {held:,} GPU-hours; at most {src_old - held:,} "
            f"can leave it.",
        )
    _check_covers_commitments(source, period, src_old - amount, "gpu_hours", leaving=amount)
    moved = _write_grant(source, period, src_version, src_old - amount)
    received = _write_grant(target, period, dst_version, dst_old + amount)
    note = f"{amount:,} GPU-hours {source.label} → {target.label}" + (
        f": {reason}" if reason else ""
    )
    _audit(actor, AuditAction.TRANSFER, source, GRANT, src_old, src_old - amount, note)
    _audit(actor, AuditAction.TRANSFER, target, GRANT, dst_old, dst_old + amount, note)
    return moved, received
