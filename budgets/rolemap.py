"""``ALLOT_OIDC_ROLE_MAP``: which identity-provider group gives which Allot role, and where.

Pure parsing, no Django models, so settings can refuse a malformed map at start-up::

    gpu-leads=leadership:/, nlp-pm=program_manager:nlp, ops=cluster_admin

Entries are separated by commas; each is ``GROUP=ROLE:SCOPE``. The scope is a node's path
(``nlp``, ``nlp/olmo``) or ``/`` for the whole organisation; ``cluster_admin`` takes none. A
group may appear in several entries. The group is everything before the last ``=``.
"""

from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured

# RoleKind's values (budgets.models imports Django models, which settings cannot);
# tests/sso/test_role_map.py checks that the two agree.
ROLE_KINDS = ("leadership", "program_manager", "project_lead", "researcher", "cluster_admin")
UNSCOPED = "cluster_admin"
ROOT = "/"


@dataclass(frozen=True)
class MappedRole:
    group: str
    role: str
    scope: str | None  # a node's slug path, "" for the root; None for cluster_admin


def parse_role_map(text: str, name: str = "ALLOT_OIDC_ROLE_MAP") -> tuple[MappedRole, ...]:
    entries = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        group, equals, target = entry.rpartition("=")
        role, colon, scope = target.partition(":")
        group, role, scope = group.strip(), role.strip(), scope.strip()
        if not equals or not group:
            raise ImproperlyConfigured(f"{name}: {entry!r} is not GROUP=ROLE:SCOPE")
        if role not in ROLE_KINDS:
            raise ImproperlyConfigured(
                f"{name}: {entry!r}: unknown role {role!r} (one of {', '.join(ROLE_KINDS)})"
            )
        if role == UNSCOPED:
            if scope and scope != ROOT:
                raise ImproperlyConfigured(f"{name}: {entry!r}: cluster_admin takes no scope")
            entries.append(MappedRole(group, role, None))
            continue
        if not colon or not scope:
            raise ImproperlyConfigured(f"{name}: {entry!r}: {role} needs a scope (a path or /)")
        entries.append(MappedRole(group, role, "" if scope == ROOT else scope.strip("/")))
    return tuple(entries)
