"""Every write to an exception goes through here: one atomic function per action, each
recording its history event (and its notifications) in the same transaction.

Unlike the budget services, these check *who* as well as *what*: the rules of who may request
and who may decide are the heart of the workflow, so the views and the API cannot skip them.
The pages and the API still resolve visibility first (`exceptions.access`), so an
outsider gets a 404 before reaching here.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from budgets.models import BudgetNode
from exceptions import approvers, effects, validation
from exceptions.errors import (
    ExceptionPermissionError,
    ExceptionValidationError,
    InvalidTransition,
)
from exceptions.models import Approval, ExceptionEvent, ExceptionRequest, Kind, State
from exceptions.notifications import notify
from exceptions.workflow import transition


def protection_valid_h() -> float:
    """How long an extended protection stays in force (it covers each restart of the job in
    that time); it also ends as soon as the job does."""
    return float(getattr(settings, "ALLOT_EXCEPTION_PROTECTION_VALID_H", 168))


def _program(node):
    if node is None or node.depth < 2:
        return None
    return BudgetNode.objects.get(path=node.path[: 2 * BudgetNode.steplen])


@transaction.atomic
def request_exception(
    actor, kind: str, *, justification="", now=None, **fields
) -> ExceptionRequest:
    """File a request. `fields` are the kind's own: job, hours (extended_protection);
    node, gpu_hours (budget_topup); cluster, gpus, start, end and optionally node (reservation).
    """
    now = now or timezone.now()
    if kind not in Kind.values:
        raise ExceptionValidationError("kind", f"kind must be one of {', '.join(Kind.values)}.")
    text = validation.justification(justification)
    if kind == Kind.EXTENDED_PROTECTION:
        data = validation.protection(actor, fields.get("job"), fields.get("hours"))
        required = approvers.approvals_required(kind, hours=data["hours"])
    elif kind == Kind.BUDGET_TOPUP:
        data = validation.topup(actor, fields.get("node"), fields.get("gpu_hours"))
        required = approvers.approvals_required(kind, gpu_hours=data["gpu_hours"])
    else:
        data = validation.reservation(
            actor,
            fields.get("cluster"),
            fields.get("gpus"),
            fields.get("start"),
            fields.get("end"),
            node=fields.get("node"),
            now=now,
        )
        required = approvers.approvals_required(
            kind, gpus=data["gpus"], window_h=data.pop("window_h")
        )
    request = ExceptionRequest(
        kind=kind,
        requester=actor,
        justification=text,
        submitted_at=now,
        approvals_required=required,
        program=_program(data["scope"]),
        **data,
    )
    request.escalation_level = approvers.first_level(request)
    request.save()
    ExceptionEvent.objects.create(
        request=request,
        at=now,
        actor=actor,
        kind=State.SUBMITTED,
        message=f"Requested {request.target_label}.",
    )
    asked = approvers.asked(request)
    notify(
        asked,
        request,
        "requested",
        f"{actor.get_username()} asks for {request.get_kind_display().lower()}: "
        f"{request.target_label}.",
    )
    return request


def _locked(pk) -> ExceptionRequest:
    """The request, locked for the rest of the transaction."""
    try:
        return (
            ExceptionRequest.objects.select_for_update(of=("self",))
            .select_related("requester", "node", "scope", "job", "cluster")
            .get(pk=pk)
        )
    except (ExceptionRequest.DoesNotExist, ValueError, TypeError):
        raise ExceptionValidationError(None, f"No exception #{pk}.") from None


def _decider_tier(actor, request) -> str:
    if actor.pk == request.requester_id:
        raise ExceptionPermissionError(None, "Nobody approves or rejects their own request.")
    if request.job_id is not None and request.job.owner_id == actor.pk:
        raise ExceptionPermissionError(
            None, "Nobody approves or rejects a request about their own job, whoever filed it."
        )
    tier = approvers.tier_of(actor, request)
    if tier is None:
        raise ExceptionPermissionError(None, "You are not an approver for this request.")
    return tier


def _must_be_submitted(request, verb):
    if request.state != State.SUBMITTED:
        raise InvalidTransition(f"exception #{request.pk} is {request.state}; it cannot be {verb}.")


@transaction.atomic
def approve_exception(actor, pk, *, comment="", now=None) -> ExceptionRequest:
    """Record `actor`'s approval; once enough distinct approvers agree, the request is approved
    and — if its start has come — activated, with its effect, in the same transaction. If the
    effect is refused (a top-up the parent cannot hold), nothing of the approval is kept."""
    now = now or timezone.now()
    request = _locked(pk)
    _must_be_submitted(request, "approved")
    tier = _decider_tier(actor, request)
    if request.approvals.filter(approver=actor).exists():
        raise ExceptionValidationError(
            "approver",
            "You have already approved; the second approval must come from someone else.",
        )
    try:
        with transaction.atomic():
            Approval.objects.create(
                request=request, approver=actor, tier=tier, at=now, comment=(comment or "").strip()
            )
    except IntegrityError:
        raise ExceptionValidationError("approver", "You have already approved.") from None
    count = request.approvals.count()
    label = approvers.TIER_LABELS[tier]
    if count < request.approvals_required:
        ExceptionEvent.objects.create(
            request=request,
            at=now,
            actor=actor,
            kind="approval",
            message=f"Approval {count} of {request.approvals_required} "
            f"({label}). {comment}".strip(),
        )
        others = [u for u in approvers.asked(request) if u.pk != actor.pk]
        notify(
            [request.requester, *others],
            request,
            "approval",
            f"{actor.get_username()} approved; one more approval from someone else is needed.",
        )
        return request
    transition(
        request,
        State.APPROVED,
        at=now,
        actor=actor,
        decided_at=now,
        decided_by=actor,
        message=f"Approved by {actor.get_username()} ({label}). {comment}".strip(),
    )
    notify(
        [request.requester],
        request,
        "approved",
        f"{actor.get_username()} approved your request: {request.target_label}.",
    )
    effects.approved(request, now)
    if request.starts_at is None or request.starts_at <= now:
        _activate(request, actor, now)
    return request


@transaction.atomic
def reject_exception(actor, pk, *, reason="", now=None) -> ExceptionRequest:
    now = now or timezone.now()
    request = _locked(pk)
    _must_be_submitted(request, "rejected")
    tier = _decider_tier(actor, request)
    reason = (reason or "").strip()
    if not reason:
        raise ExceptionValidationError("reason", "Say why the request is rejected.")
    transition(
        request,
        State.REJECTED,
        at=now,
        actor=actor,
        decided_at=now,
        decided_by=actor,
        decision_reason=reason,
        message=f"Rejected by {actor.get_username()} ({approvers.TIER_LABELS[tier]}): {reason}",
    )
    notify(
        [request.requester],
        request,
        "rejected",
        f"{actor.get_username()} rejected your request: {reason}",
    )
    return request


@transaction.atomic
def withdraw_exception(actor, pk, *, now=None) -> ExceptionRequest:
    now = now or timezone.now()
    request = _locked(pk)
    if actor.pk != request.requester_id:
        raise ExceptionPermissionError(None, "Only the person who asked can withdraw a request.")
    _must_be_submitted(request, "withdrawn")
    transition(
        request,
        State.WITHDRAWN,
        at=now,
        actor=actor,
        decided_at=now,
        message=f"Withdrawn by {actor.get_username()}.",
    )
    notify(
        approvers.asked(request),
        request,
        "withdrawn",
        f"{actor.get_username()} withdrew the request: {request.target_label}.",
    )
    return request


def _ends_at(request, now) -> dt.datetime:
    if request.kind == Kind.BUDGET_TOPUP:
        return effects.topup_ends_at(now)
    if request.kind == Kind.EXTENDED_PROTECTION:
        hours = max(float(request.hours), protection_valid_h())
        return now + dt.timedelta(hours=hours)
    return request.ends_at


def _activate(request, actor, now) -> None:
    transition(
        request,
        State.ACTIVE,
        at=now,
        actor=actor,
        activated_at=now,
        starts_at=request.starts_at or now,
        ends_at=_ends_at(request, now),
        message="In force.",
    )
    result = effects.apply(request, actor, now)
    if result:
        request.effect = result
        request.save(update_fields=["effect"])


@transaction.atomic
def activate_exception(pk, *, now=None) -> bool:
    """An approved request whose start has come becomes active (safe to run twice)."""
    now = now or timezone.now()
    request = _locked(pk)
    if request.state != State.APPROVED or (request.starts_at and request.starts_at > now):
        return False
    _activate(request, request.decided_by, now)
    notify(
        [request.requester],
        request,
        "active",
        f"Your exception is in force: {request.target_label}.",
    )
    return True


def _protection_still_running(request, now) -> bool:
    job = request.job
    return bool(
        job
        and job.state == job.State.RUNNING
        and job.protection_source == request.source
        and job.protected_until
        and job.protected_until > now
    )


def expiry_due(request, now) -> bool:
    if request.state != State.ACTIVE:
        return False
    if request.kind == Kind.EXTENDED_PROTECTION:
        if request.job is None or request.job.is_terminal:
            return True
        return request.ends_at <= now and not _protection_still_running(request, now)
    return request.ends_at is not None and request.ends_at <= now


@transaction.atomic
def expire_exception(pk, *, now=None) -> bool:
    """An active request past its end expires and its effect is undone (safe to run twice).
    A protection never ends in the middle of the protected run it granted."""
    now = now or timezone.now()
    request = _locked(pk)
    if not expiry_due(request, now):
        return False
    transition(request, State.EXPIRED, at=now, expired_at=now, message="Expired.")
    effects.undo(request, now)
    notify(
        [request.requester],
        request,
        "expired",
        f"Your exception has expired: {request.target_label}.",
    )
    return True


def escalation_due(request, now) -> bool:
    since = request.escalated_at or request.submitted_at
    limit = dt.timedelta(hours=approvers.escalate_after_h())
    return request.state == State.SUBMITTED and since + limit <= now


@transaction.atomic
def escalate_exception(pk, *, now=None) -> bool:
    """A request pending too long is sent up one tier (safe to run twice: the UPDATE is
    conditional on the level read)."""
    now = now or timezone.now()
    request = _locked(pk)
    if not escalation_due(request, now):
        return False
    level = approvers.next_level(request)
    if level is None:
        return False
    updated = ExceptionRequest.objects.filter(
        pk=request.pk, state=State.SUBMITTED, escalation_level=request.escalation_level
    ).update(escalation_level=level, escalated_at=now)
    if updated != 1:
        return False
    request.escalation_level, request.escalated_at = level, now
    tier = approvers.ladder(request)[level]
    waited = Decimal(str(approvers.escalate_after_h()))
    ExceptionEvent.objects.create(
        request=request,
        at=now,
        kind="escalation",
        message=f"Pending over {waited:g} h: sent up to {approvers.TIER_LABELS[tier]}.",
    )
    notify(
        [*approvers.asked(request), request.requester],
        request,
        "escalated",
        f"Pending over {waited:g} h, now asking {approvers.TIER_LABELS[tier]}: "
        f"{request.target_label}.",
    )
    return True
