"""Roles that follow the identity provider's groups (single sign-on, ``ALLOT_OIDC_ROLE_MAP``).

The map governs only the (role, scope) pairs it names: at each sign-in a user gains those their
groups give and loses those their groups no longer give; roles given by hand (in the admin) for
pairs the map does not name are left alone. Every grant and revocation writes an audit row on
the role's node (the organisation's root for ``cluster_admin``) in the same transaction, like
every other governance change.
"""

import logging

from django.contrib.auth import get_user_model
from django.db import transaction

from budgets.access import forget_roles
from budgets.models import AuditAction, AuditEntry, BudgetNode, Role
from budgets.rolemap import MappedRole
from core.logs import event

log = logging.getLogger(__name__)
SOURCE = "single sign-on"


def _resolve(mapping: tuple[MappedRole, ...]) -> dict[MappedRole, BudgetNode]:
    """Each map entry's node (the root for cluster_admin); entries whose path names no active
    node are left out and logged, so a renamed project does not stop anyone signing in."""
    paths = {m.scope if m.scope is not None else "" for m in mapping}
    nodes = {n.slug_path: n for n in BudgetNode.objects.filter(slug_path__in=paths, archived=False)}
    resolved = {}
    for entry in mapping:
        node = nodes.get(entry.scope if entry.scope is not None else "")
        if node is None:
            event(log, "sso_role_scope_missing", logging.WARNING, group=entry.group,
                  role=entry.role, scope=entry.scope)  # fmt: skip
            continue
        resolved[entry] = node
    return resolved


def _key(role: str, node: BudgetNode) -> tuple[str, int | None]:
    return (role, None if role == Role.Kind.CLUSTER_ADMIN else node.pk)


@transaction.atomic
def sync_mapped_roles(user, groups, mapping: tuple[MappedRole, ...]) -> list[AuditEntry]:
    """Make ``user``'s mapped roles match ``groups``; returns the audit rows written.

    1. Resolve every map entry to its node; the pairs they name are the governed ones.
    2. Wanted: the governed pairs of the entries whose group the user is in.
    3. Grant what is wanted and missing; revoke what is governed, held and not wanted.
    """
    # Two sign-ins of one user at once would both create the same role: one waits here.
    get_user_model().objects.select_for_update().filter(pk=user.pk).first()
    resolved = _resolve(mapping)
    governed = {_key(e.role, node): node for e, node in resolved.items()}
    groups = set(groups)
    wanted = {_key(e.role, node) for e, node in resolved.items() if e.group in groups}
    held = {
        (role.role, role.node_id): role
        for role in Role.objects.select_for_update().filter(user=user)
        if (role.role, role.node_id) in governed
    }
    who = user.get_username()
    why = f"{SOURCE}: groups {', '.join(sorted(groups)) or '(none)'}"
    entries = []
    for key in sorted(wanted - held.keys(), key=str):
        role, node_id = key
        Role.objects.create(user=user, role=role, node_id=node_id)
        entries.append(_audit(AuditAction.GRANT_ROLE, governed[key], "", f"{role} for {who}", why))
    for key in sorted(held.keys() - wanted, key=str):
        role, _ = key
        held[key].delete()
        entries.append(_audit(AuditAction.REVOKE_ROLE, governed[key], f"{role} for {who}", "", why))
    if entries:
        forget_roles(user)
        event(log, "sso_roles_changed", user=who,
              changes=[f"{e.action} {e.old or e.new}" for e in entries])  # fmt: skip
    return entries


def _audit(action, node, old, new, reason) -> AuditEntry:
    # actor None: the identity provider decided, not a person in Allot ("system" in the history).
    return AuditEntry.objects.create(
        actor=None, action=action, node=node, field="role", old=old, new=new, reason=reason
    )
