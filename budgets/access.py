"""Who may see and change which budget nodes: the one choke point every page and endpoint uses.

Scope is a set of subtrees. A role on a node covers the node and everything below it:

- leadership: sees its subtree (usually the whole tree) and sets any grant in it;
- program manager: sees its program and sub-allocates below it (not the program's own grant,
  which is leadership's call);
- project lead: sees its project and sub-allocates below it, if the project has levels;
- researcher: sees its projects, changes no grant;
- cluster admin (a role row without a node, the "cluster-admins" group, or a superuser): sees
  the whole tree to run the clusters, changes no grant.

The user's roles are read once per request and cached on the user object.
"""

from functools import cache

from django.contrib.auth.models import AnonymousUser, Group
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.db.models import Exists, OuterRef, Q
from django.http import Http404

from budgets.models import BudgetNode, Role, RoleKind
from core.parsing import parse_id
from core.raw_rows import reading, table

CLUSTER_ADMIN_GROUP = "cluster-admins"
EDITING_BELOW = {RoleKind.PROGRAM_MANAGER, RoleKind.PROJECT_LEAD}
SUBMITTING = {RoleKind.RESEARCHER, RoleKind.PROJECT_LEAD, RoleKind.PROGRAM_MANAGER}


def _roles(user) -> list[tuple[str, str | None]]:
    """[(role, node path or None)], read once and cached on the user object."""
    if user is None or isinstance(user, AnonymousUser) or not user.is_authenticated:
        return []
    cached = getattr(user, "_allot_budget_roles", None)
    if cached is None:
        with connection.cursor() as cursor:
            cursor.execute(_ROLES_SQL, [user.pk, CLUSTER_ADMIN_GROUP, user.pk])
            cached = [(role, path) for role, path in cursor.fetchall()]
        if user.is_superuser and (RoleKind.CLUSTER_ADMIN, None) not in cached:
            cached.append((RoleKind.CLUSTER_ADMIN, None))
        user._allot_budget_roles = cached
    return cached


# The roles with their nodes' paths, and the admin group's membership, in one statement. Plain
# SQL: every API call and page asks, and composing this union through the ORM cost more
# Python than the rest of a submission's lookups (see docs/benchmarks.md, "API submissions").
_ROLES_SQL = (
    f"SELECT r.role, n.path FROM {Role._meta.db_table} r "
    f"LEFT JOIN {BudgetNode._meta.db_table} n ON n.id = r.node_id WHERE r.user_id = %s "
    f"UNION ALL SELECT '{RoleKind.CLUSTER_ADMIN.value}', NULL FROM {Group._meta.db_table} g "
    f"JOIN {Group.user_set.through._meta.db_table} m ON m.group_id = g.id "
    "WHERE g.name = %s AND m.user_id = %s"
)


def forget_roles(user) -> None:
    """Drop the cached roles (after granting a role in the same request or test)."""
    if hasattr(user, "_allot_budget_roles"):
        del user._allot_budget_roles


def is_cluster_admin(user) -> bool:
    return any(role == RoleKind.CLUSTER_ADMIN for role, _ in _roles(user))


def is_leadership(user) -> bool:
    return any(role == RoleKind.LEADERSHIP for role, _ in _roles(user))


def role_paths(user) -> list[str]:
    """Tree paths of the nodes the user holds a role on (the tops of their scope)."""
    return [path for role, path in _roles(user) if path]


def visible_nodes(user):
    """Active nodes the user may see, in tree order."""
    active = BudgetNode.objects.filter(archived=False).order_by("path")
    if is_cluster_admin(user):
        return active
    paths = role_paths(user)
    if not paths:
        return active.none()
    scope = Q()
    for path in paths:
        scope |= Q(path__startswith=path)
    return active.filter(scope)


def can_see(user, node) -> bool:
    if is_cluster_admin(user):
        return True
    return any(node.path.startswith(path) for path in role_paths(user))


def can_edit_grant(user, node) -> bool:
    """Leadership sets any grant in its subtree, its own node's included; a program manager or
    project lead sets the grants strictly below its node."""
    if node.archived:
        return False
    for role, path in _roles(user):
        if not path:
            continue
        if role == RoleKind.LEADERSHIP and node.path.startswith(path):
            return True
        if role in EDITING_BELOW and node.path.startswith(path) and node.path != path:
            return True
    return False


def can_manage_structure(user, parent) -> bool:
    """Creating, renaming, moving or archiving a node is allowed where setting its grant is;
    for a new child, that is decided on the parent it goes under."""
    return can_edit_grant(user, parent) or any(
        role in EDITING_BELOW and parent.path == path for role, path in _roles(user)
    )


def get_node_for_user(user, pk, write=False) -> BudgetNode:
    """The node, if the user may see it (and, with `write`, change its grant); otherwise
    Http404 for a node outside their scope — a manager does not learn another program's
    nodes exist — and PermissionDenied for a visible node they may not change."""
    try:
        node = BudgetNode.objects.get(pk=parse_id(pk), archived=False)
    except BudgetNode.DoesNotExist:
        raise Http404("No such budget node") from None
    if not can_see(user, node):
        raise Http404("No such budget node")
    if write and not can_edit_grant(user, node):
        raise PermissionDenied("You cannot change this budget")
    return node


def leads(user, node) -> bool:
    """A project lead role on the node or above it."""
    return any(
        role == RoleKind.PROJECT_LEAD and path and node.path.startswith(path)
        for role, path in _roles(user)
    )


def submittable_project(user, slug_path: str) -> BudgetNode | None:
    """The project ``slug_path`` names if the user may submit jobs into it (it is among
    ``user_projects``), else None. One indexed lookup (and one more for a node with
    children): every API submission asks."""
    paths = [path for role, path in _roles(user) if path and role in SUBMITTING]
    nodes = reading(BudgetNode)
    with connection.cursor() as cursor:
        cursor.execute(_project_sql(), [slug_path])
        row = cursor.fetchone()
    node = nodes.instance(row) if row is not None else None
    if node is None or not any(node.path.startswith(path) for path in paths):
        return None
    if node.numchild and BudgetNode.objects.get_children(node).filter(archived=False).exists():
        return None  # not a leaf: an active child takes the jobs
    return node


@cache
def _project_sql() -> str:
    """Plain SQL for the same reason as the roles': every submission asks."""
    return (
        f"SELECT {reading(BudgetNode).columns('n')} FROM {table(BudgetNode)} n "
        "WHERE slug_path = %s AND NOT archived AND depth > 1"
    )


def user_projects(user):
    """The leaf projects the user may submit jobs into: leaves under their researcher,
    project lead or program manager roles."""
    paths = [path for role, path in _roles(user) if path and role in SUBMITTING]
    if not paths:
        return BudgetNode.objects.none()
    scope = Q()
    for path in paths:
        scope |= Q(path__startswith=path)
    leaves = BudgetNode.objects.filter(scope, archived=False, depth__gt=1)
    # A project is a leaf when none of its children is active (archived ones do not count).
    has_active_child = BudgetNode.objects.filter(
        archived=False, path__startswith=OuterRef("path"), depth=OuterRef("depth") + 1
    )
    return leaves.exclude(Exists(has_active_child)).order_by("path")
