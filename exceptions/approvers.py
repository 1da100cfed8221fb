"""Who approves which request: resolution by kind and scope, thresholds, escalation.

Each kind has a ladder of tiers, lowest first:

- budget_topup: the program manager (or project lead) above the node — a manager of one
  program never decides for another — then leadership above it;
- extended_protection and reservation: cluster admins, then leadership above the project.

Anyone on the ladder may decide (leadership sits above its managers); the ladder decides who
is *asked*: a new request goes to its lowest tier that has someone in it, and a request left
pending longer than ALLOT_EXCEPTION_ESCALATE_AFTER_H goes up one tier. Nobody approves their
own request, and a large ask needs a second approval from someone else.

Settings are read at call time (tests and operators may change them), with defaults here.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q

from budgets import access
from budgets.models import BudgetNode, Role, RoleKind
from exceptions.models import ExceptionRequest, Kind

CLUSTER_ADMIN = "cluster_admin"
MANAGER = "manager"
LEADERSHIP = "leadership"
LADDERS = {
    Kind.BUDGET_TOPUP: (MANAGER, LEADERSHIP),
    Kind.EXTENDED_PROTECTION: (CLUSTER_ADMIN, LEADERSHIP),
    Kind.RESERVATION: (CLUSTER_ADMIN, LEADERSHIP),
}
TIER_LABELS = {
    CLUSTER_ADMIN: "cluster admins",
    MANAGER: "program managers",
    LEADERSHIP: "leadership",
}
MANAGING = {RoleKind.PROGRAM_MANAGER, RoleKind.PROJECT_LEAD}


def second_approval_gpu_hours() -> Decimal:
    return Decimal(str(getattr(settings, "ALLOT_EXCEPTION_SECOND_APPROVAL_GPU_HOURS", 1000)))


def second_approval_hours() -> Decimal:
    return Decimal(str(getattr(settings, "ALLOT_EXCEPTION_SECOND_APPROVAL_HOURS", 24)))


def escalate_after_h() -> float:
    return float(getattr(settings, "ALLOT_EXCEPTION_ESCALATE_AFTER_H", 24))


def ladder(request: ExceptionRequest) -> tuple[str, ...]:
    return LADDERS[request.kind]


def approvals_required(kind: str, *, hours=None, gpu_hours=None, gpus=None, window_h=None) -> int:
    """2 for a large ask (strictly above the thresholds), else 1. A reservation's size is its
    GPU-hours: GPUs × the window's hours."""
    if kind == Kind.EXTENDED_PROTECTION:
        large = Decimal(hours) > second_approval_hours()
    elif kind == Kind.BUDGET_TOPUP:
        large = Decimal(gpu_hours) > second_approval_gpu_hours()
    else:
        large = Decimal(gpus) * Decimal(str(window_h)) > second_approval_gpu_hours()
    return 2 if large else 1


def _role_rows(user) -> list[tuple[str, str | None]]:
    cached = getattr(user, "_allot_exception_roles", None)
    if cached is None:
        cached = list(Role.objects.filter(user=user).values_list("role", "node__path"))
        user._allot_exception_roles = cached
    return cached


def _scope_path(request: ExceptionRequest) -> str | None:
    scope = request.scope
    return scope.path if scope is not None else None


def _covers(role_path: str, scope_path: str | None, *, strictly: bool) -> bool:
    if scope_path is None:
        # Work without a project (unfunded jobs, a reservation for no one): only roles on the
        # root, which govern everything, cover it.
        return len(role_path) == BudgetNode.steplen and not strictly
    if strictly:
        return scope_path.startswith(role_path) and scope_path != role_path
    return scope_path.startswith(role_path)


def in_tier(user, tier: str, request: ExceptionRequest) -> bool:
    if tier == CLUSTER_ADMIN:
        return access.is_cluster_admin(user)
    scope = _scope_path(request)
    for role, path in _role_rows(user):
        if not path:
            continue
        if (
            tier == LEADERSHIP
            and role == RoleKind.LEADERSHIP
            and _covers(path, scope, strictly=False)
        ):
            return True
        if tier == MANAGER and role in MANAGING and _covers(path, scope, strictly=True):
            return True
    return False


def tier_of(user, request: ExceptionRequest) -> str | None:
    """The lowest tier of the request's ladder `user` is in; None if they may not decide it
    (their own request, or outside its scope)."""
    if user is None or not user.is_authenticated or user.pk == request.requester_id:
        return None
    for tier in ladder(request):
        if in_tier(user, tier, request):
            return tier
    return None


def can_decide(user, request: ExceptionRequest) -> bool:
    return tier_of(user, request) is not None


def users_in_tier(request: ExceptionRequest, tier: str) -> list:
    """Everyone in one tier of the request's ladder, the requester excepted (a few queries)."""
    users = get_user_model().objects.filter(is_active=True).exclude(pk=request.requester_id)
    if tier == CLUSTER_ADMIN:
        return list(
            users.filter(
                Q(is_superuser=True)
                | Q(groups__name=access.CLUSTER_ADMIN_GROUP)
                | Q(budget_roles__role=RoleKind.CLUSTER_ADMIN)
            )
            .distinct()
            .order_by("username")
        )
    kinds = [RoleKind.LEADERSHIP] if tier == LEADERSHIP else list(MANAGING)
    scope = _scope_path(request)
    strictly = tier == MANAGER
    rows = Role.objects.filter(role__in=kinds, node__isnull=False).values_list(
        "user_id", "node__path"
    )
    ids = {uid for uid, path in rows if _covers(path, scope, strictly=strictly)}
    return list(users.filter(pk__in=ids).order_by("username"))


def first_level(request: ExceptionRequest) -> int:
    """The lowest tier with someone in it (the top one if nobody is anywhere)."""
    tiers = ladder(request)
    for level, tier in enumerate(tiers):
        if users_in_tier(request, tier):
            return level
    return len(tiers) - 1


def next_level(request: ExceptionRequest) -> int | None:
    tiers = ladder(request)
    for level in range(request.escalation_level + 1, len(tiers)):
        if users_in_tier(request, tiers[level]):
            return level
    return None


def asked(request: ExceptionRequest) -> list:
    """Who the request is waiting on now: its current tier."""
    return users_in_tier(request, ladder(request)[request.escalation_level])


def leadership_covering(user, path: str) -> bool:
    """May `user`, as leadership, raise the grant at `path` (a top-up beyond the parent)?"""
    return any(
        role == RoleKind.LEADERSHIP and path.startswith(node_path)
        for role, node_path in _role_rows(user)
        if node_path
    )


def leads_whole_tree(user) -> bool:
    return any(
        role == RoleKind.LEADERSHIP and node_path and len(node_path) == BudgetNode.steplen
        for role, node_path in _role_rows(user)
    )
