"""The shape of the budget tree: create, rename, move and archive nodes, and their weights.
Each action is atomic and writes its audit row in the same transaction (see
`budgets.services`, which re-exports these)."""

from decimal import Decimal

from django.db import transaction
from django.db.models import CharField, Value
from django.db.models.functions import Cast, Concat
from django.utils.text import slugify

from budgets.balances import hours_up, usage_by_path
from budgets.errors import BudgetValidationError
from budgets.models import AuditAction, BudgetNode, Lien
from budgets.periods import BudgetPeriod
from budgets.service_helpers import (
    GRANT,
    _audit,
    _children,
    _in_force,
    _lock,
    _parent,
    parse_gpu_hours,
)


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
