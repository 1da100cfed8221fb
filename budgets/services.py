"""Every change to the budget tree goes through here: one atomic function per action, each
writing its audit row in the same transaction, so a change and its record commit together.

Services trust their caller on *who* may act (views and the API check scope through
`budgets.access` first) and check *what* is valid themselves, raising `BudgetValidationError`
or `ConflictError` with the field at fault before anything is written.

The ledger services (charging usage, liens) live in `budgets.ledger` and are re-exported here.
"""

from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import CharField, F, Value
from django.db.models.functions import Cast, Concat
from django.utils.text import slugify

from budgets.balances import committed_gpu_hours, hours_up, usage_by_path, with_grants
from budgets.errors import (
    BudgetValidationError,
    ConflictError,
    InsufficientFunds,  # noqa: F401 (re-export)
)
from budgets.ledger import charge_usage, hold_lien, release_lien  # noqa: F401 (re-export)
from budgets.models import AuditAction, AuditEntry, BudgetNode, Grant, Lien
from budgets.periods import BudgetPeriod

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
def set_grant(actor, node, gpu_hours, *, expected_version=None, reason="", period=None) -> Grant:
    """Set a node's grant for a period (the current one by default).

    The grant must fit in what the parent holds beside the other children, and must still
    cover what the node's own children hold; a cut must also still cover what the node (with
    its subtree) has spent this period plus what its running jobs' open liens hold, so no
    balance goes below zero. `expected_version` is the version the caller
    saw; if someone changed the grant since, a ConflictError names the field.
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
        _check_covers_commitments(node, period, amount, GRANT)
    if amount == old:
        in_force = Grant.objects.filter(node=node, period_start__lte=period.start)
        current = in_force.order_by("-period_start").first()
        if current is not None:
            return current
        # A node that never had a grant holds 0 by default; setting 0 records it.
    row = _write_grant(node, period, version, amount)
    _audit(actor, AuditAction.SET_GRANT, node, GRANT, old, amount, reason)
    return row


def _check_covers_commitments(node, period, amount, field, *, leaving=None):
    """A cut may not go below what was charged this period plus what open liens hold: the
    running jobs' protected windows were promised against this balance (Slurm's association
    limits and ColdFront's allocations refuse a cut under usage the same way). `leaving` is
    the amount of a transfer, whose message speaks of what can leave the node."""
    used, held = committed_gpu_hours(node, period)
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


@transaction.atomic
def set_weight(actor, node, weight, *, reason="") -> BudgetNode:
    """Override (or, with None, clear) the share a node has among its siblings."""
    new = None if weight in (None, "") else parse_gpu_hours(weight, "weight")
    node = _lock(node)
    old = node.weight
    if old == new:
        return node
    node.weight = new
    node.save(update_fields=["weight"])
    _audit(actor, AuditAction.SET_WEIGHT, node, "weight", old, new, reason)
    return node


def _clean_name(name: str, slug: str | None) -> tuple[str, str]:
    name = (name or "").strip()
    if not name:
        raise BudgetValidationError("name", "Give the node a name.")
    if len(name) > 120:
        raise BudgetValidationError("name", "Keep the name under 120 characters.")
    if slug and len(slug) > 60:
        raise BudgetValidationError("slug", "Keep the short name under 60 characters.")
    slug = slugify(slug if slug else name)[:60]
    if not slug:
        raise BudgetValidationError("slug", "The short name needs letters or digits.")
    return name, slug


def _check_slug_free(parent, slug, exclude=None):
    clash = _children(parent).filter(slug=slug)
    if exclude is not None:
        clash = clash.exclude(pk=exclude.pk)
    if clash.exists():
        raise BudgetValidationError("slug", f"{parent.label} already has a child called {slug}.")


def _join(parent_slug_path: str, slug: str) -> str:
    return f"{parent_slug_path}/{slug}" if parent_slug_path else slug


@transaction.atomic
def create_root(actor, name, slug=None) -> BudgetNode:
    """The organisation: the one root, excluded from paths."""
    name, slug = _clean_name(name, slug)
    if BudgetNode.objects.get_root_nodes().exists():
        raise BudgetValidationError("parent", "The organisation already has a root.")
    root = BudgetNode.objects.add_root(create_kwargs={"name": name, "slug": slug, "slug_path": ""})
    _audit(actor, AuditAction.CREATE, root, "name", None, name)
    return root


@transaction.atomic
def create_node(actor, parent, name, slug=None, *, reason="") -> BudgetNode:
    name, slug = _clean_name(name, slug)
    parent = _lock(parent)
    if parent.archived:
        raise BudgetValidationError("parent", f"{parent.label} is archived.")
    _check_slug_free(parent, slug)
    node = BudgetNode.objects.add_child(
        parent,
        create_kwargs={"name": name, "slug": slug, "slug_path": _join(parent.slug_path, slug)},
    )
    _audit(actor, AuditAction.CREATE, node, "name", None, name, reason)
    return node


def _repath_subtree(node: BudgetNode) -> None:
    """Recompute slug paths of a node and its descendants after a rename or a move."""
    node.refresh_from_db()
    parent = None if node.is_root() else _parent(node)
    prefix = {node.path: _join(parent.slug_path, node.slug) if parent else ""}
    subtree = list(BudgetNode.objects.filter(path__startswith=node.path).order_by("path"))
    for n in subtree:
        if n.pk != node.pk:
            prefix[n.path] = _join(prefix[n.path[: -n.steplen]], n.slug)
        n.slug_path = prefix[n.path]
    # Two passes so a swap of paths inside the subtree never trips the unique constraint.
    BudgetNode.objects.filter(path__startswith=node.path).update(
        slug_path=Concat(Value("~"), Cast("pk", CharField()), Value("~"))
    )
    BudgetNode.objects.bulk_update(subtree, ["slug_path"])


@transaction.atomic
def rename_node(actor, node, name, *, slug=None, reason="") -> BudgetNode:
    """Rename a node; with `slug`, its path (and its descendants' paths) change too."""
    node = _lock(node)
    name, new_slug = _clean_name(name, slug or node.slug)
    if new_slug != node.slug and not node.is_root():
        _check_slug_free(_parent(node), new_slug, exclude=node)
    if name != node.name:
        _audit(actor, AuditAction.RENAME, node, "name", node.name, name, reason)
    if new_slug != node.slug:
        _audit(actor, AuditAction.RENAME, node, "slug", node.slug, new_slug, reason)
    node.name, node.slug = name, new_slug
    node.save(update_fields=["name", "slug"])
    _repath_subtree(node)
    return node


@transaction.atomic
def move_node(actor, node, new_parent, *, reason="", period=None) -> BudgetNode:
    """Move a node (and its subtree) under another parent whose grant can take it."""
    period = period or BudgetPeriod.current()
    node, new_parent = _lock(node), _lock(new_parent)
    if node.is_root():
        raise BudgetValidationError("parent", "The organisation root cannot move.")
    if new_parent.path.startswith(node.path):
        raise BudgetValidationError(
            "parent", f"{node.label} cannot move under itself or its own descendant."
        )
    if new_parent.archived:
        raise BudgetValidationError("parent", f"{new_parent.label} is archived.")
    old_parent = _parent(node)
    if old_parent.pk == new_parent.pk:
        return node
    _check_slug_free(new_parent, node.slug)
    children = list(_children(new_parent).filter(archived=False))
    grants = _in_force([node, new_parent, *children], period)
    held = sum((grants[c.pk][0] for c in children), Decimal("0"))
    if held + grants[node.pk][0] > grants[new_parent.pk][0]:
        raise BudgetValidationError(
            "parent",
            f"{new_parent.label} holds {grants[new_parent.pk][0]:,} GPU-hours with "
            f"{held:,} given out; it cannot take {node.label}'s {grants[node.pk][0]:,}.",
        )
    old_label = old_parent.label
    BudgetNode.objects.move(node, new_parent, "last-child")
    _repath_subtree(node)
    _audit(actor, AuditAction.MOVE, node, "parent", old_label, new_parent.label, reason)
    return node


@transaction.atomic
def archive_node(actor, node, *, reason="", period=None) -> BudgetNode:
    """Archive a node and its subtree once it holds nothing: grants first go back up."""
    period = period or BudgetPeriod.current()
    node = _lock(node)
    if node.is_root():
        raise BudgetValidationError("node", "The organisation root cannot be archived.")
    subtree = list(BudgetNode.objects.filter(path__startswith=node.path, archived=False))
    grants = _in_force(subtree, period)
    # What was spent this period stays spent (a grant cannot be cut below it): a node is
    # empty once its grant is down to its own and its subtree's usage.
    used = usage_by_path(period.start_at, period.end_at, under=node.path)
    holding = [n for n in subtree if grants[n.pk][0] > hours_up(used.get(n.path, 0))][:1]
    if holding:
        spent = hours_up(used.get(holding[0].path, 0))
        raise BudgetValidationError(
            GRANT,
            f"{holding[0].label} still holds GPU-hours this period; set its grant to "
            f"{spent:,} (what it has used) or transfer the rest before archiving.",
        )
    if Lien.objects.filter(node__path__startswith=node.path, released_at__isnull=True).exists():
        raise BudgetValidationError("node", f"{node.label} funds running jobs.")
    BudgetNode.objects.filter(path__startswith=node.path).update(archived=True)
    _audit(actor, AuditAction.ARCHIVE, node, "archived", False, True, reason)
    node.refresh_from_db()
    return node
