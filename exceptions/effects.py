"""What an active exception changes, and how its expiry undoes it.

- extended_protection: the job may be protected for `hours` from each start (the scheduling
  service extends a running job's current protection now, growing its lien for the extra
  protected time, and cites the exception as the job's protection source; if the budget cannot
  hold that lien, the approval is refused). Expiry hands the job back to its own contract
  and shrinks the lien to what that contract still needs.
- budget_topup: the node's grant for the current period rises by `gpu_hours`, through
  `budgets.services.set_grant` (which checks it fits the parent and writes the audit row,
  citing the exception). If it does not fit, only leadership can make room: with a
  leadership approval covering them, the ancestors are raised too, top-down, each audited.
  The top-up ends with the period: at expiry the *next* period's grant is written back down.
  Hours already spent are not clawed back — the period they were granted for is over, and
  charging them twice would punish the approved run.
- reservation: at approval (before its window opens, so the engine can clear capacity without
  cutting protected work) the workflow writes a reservation record the scheduler owns
  (`scheduling.services.hold_reservation`); expiry releases it. Effects flow one way: the
  scheduler never reads the workflow's tables.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.db import transaction

from budgets.errors import BudgetError
from budgets.models import BudgetNode, Grant
from budgets.periods import BudgetPeriod
from exceptions.errors import ExceptionValidationError
from exceptions.models import ExceptionEvent, ExceptionRequest, Kind

CENT = Decimal("0.01")


def _note(request, at, message, actor=None):
    ExceptionEvent.objects.create(
        request=request,
        at=at,
        kind="effect",
        message=message,
        actor=actor if getattr(actor, "pk", None) else None,
    )


def apply(request: ExceptionRequest, actor, now: dt.datetime) -> dict:
    """Apply the effect; returns what to store in `request.effect` for the undo."""
    if request.kind == Kind.EXTENDED_PROTECTION:
        return _protect(request, now)
    if request.kind == Kind.BUDGET_TOPUP:
        return _topup(request, actor, now)
    _note(
        request,
        now,
        f"{request.gpus} GPUs on {request.cluster} held for the engine from "
        f"{request.starts_at:%Y-%m-%d %H:%M} to {request.ends_at:%Y-%m-%d %H:%M}.",
    )
    return {}


def approved(request: ExceptionRequest, now: dt.datetime) -> None:
    """What an approval writes before the exception's start: a reservation's held capacity."""
    from scheduling.services import hold_reservation

    if request.kind != Kind.RESERVATION:
        return
    hold_reservation(
        f"exception-{request.pk}",
        request.cluster,
        request.node,
        request.gpus,
        request.starts_at,
        request.ends_at,
        request.source,
    )


def undo(request: ExceptionRequest, now: dt.datetime) -> None:
    from scheduling.services import release_reservation

    if request.kind == Kind.EXTENDED_PROTECTION:
        _unprotect(request, now)
    elif request.kind == Kind.BUDGET_TOPUP:
        _end_topup(request, now)
    else:
        release_reservation(f"exception-{request.pk}", now)
        _note(request, now, "The reservation's window is over; its capacity is free again.")


def _protect(request, now) -> dict:
    from scheduling.pricing import UnpricedGpuType
    from scheduling.services import apply_protection_exception

    if request.job_id is None:
        return {}
    try:
        job = apply_protection_exception(request.job_id, int(request.hours * 3600), request.source)
    except BudgetError as exc:  # the lien for the extra protected hours does not fit
        raise ExceptionValidationError(
            "hours",
            f"Job #{request.job_id} cannot be protected for {request.hours_label} h: its "
            f"budget cannot hold the lien for the extra protected time. {exc.message}",
        ) from None
    except UnpricedGpuType as exc:  # no price, so no lien can be reckoned: an operator's fix
        raise ExceptionValidationError(
            "hours",
            f"Job #{request.job_id} cannot be protected for longer yet: {exc.args[0]}.",
        ) from None
    until = (
        f"; protected until {job.protected_until:%Y-%m-%d %H:%M %Z}"
        if (job.state == job.State.RUNNING and job.protected_until)
        else ""
    )
    _note(
        request,
        now,
        f"Job #{job.pk} is protected for {request.hours_label} h from each start{until}.",
    )
    return {"protected_s": int(request.hours * 3600)}


def _unprotect(request, now) -> None:
    from scheduling.services import revoke_protection_exception

    if request.job_id is None:
        return
    job = revoke_protection_exception(request.job_id, request.source)
    released = getattr(job, "lien_released", 0)
    _note(
        request,
        now,
        f"Job #{request.job_id} is back to its own runtime contract"
        + (
            f"; its lien for the extra protected time shrank by {released / 3600:,.2f} "
            "GPU-hours, back to its budget."
            if released
            else "."
        ),
    )


def _grants(nodes, period) -> dict[int, Decimal]:
    from budgets.balances import with_grants

    rows = with_grants(BudgetNode.objects.filter(pk__in=[n.pk for n in nodes]), period)
    return {
        pk: Decimal(g or 0).quantize(CENT) for pk, g in rows.values_list("pk", "grant_in_force")
    }


def _raises_needed(node, amount, period) -> list[tuple[BudgetNode, Decimal]]:
    """[(node, increase)] from `node` upwards: each ancestor whose unallocated grant cannot
    absorb the increase of the child below it must rise by the shortfall."""
    raises = [(node, amount)]
    child, need = node, amount
    while not child.is_root():
        parent = BudgetNode.objects.get(path=child.path[: -BudgetNode.steplen])
        children = list(
            BudgetNode.objects.filter(
                path__startswith=parent.path, depth=parent.depth + 1, archived=False
            )
        )
        grants = _grants([parent, *children], period)
        free = grants[parent.pk] - sum((grants[c.pk] for c in children), Decimal("0"))
        if need <= free:
            break
        need = need - max(free, Decimal("0"))
        raises.append((parent, need))
        child = parent
    return raises


def _topup(request, actor, now) -> dict:
    from budgets.services import set_grant
    from exceptions.approvers import leadership_covering

    period = BudgetPeriod.current(now)
    node = request.node
    raises = _raises_needed(node, request.gpu_hours, period)
    leaders = [a.approver for a in request.approvals.select_related("approver")]
    top = raises[-1][0]
    if len(raises) > 1 and not any(leadership_covering(u, top.path) for u in leaders):
        parent = raises[1][0]
        raise ExceptionValidationError(
            "gpu_hours",
            f"A top-up of {request.gpu_hours:,} GPU-hours exceeds what {parent.label} has left "
            f"to give; only leadership can approve it (by raising {parent.label} too).",
        )
    reason = (
        f"{request.source} ({request.get_kind_display().lower()}, approved): "
        f"{request.justification}"
    )[:2000]
    grants = _grants([n for n, _ in raises], period)
    applied = []
    for target, increase in reversed(raises):  # top-down, so each child fits its raised parent
        old = grants[target.pk]
        try:
            set_grant(actor, target, old + increase, period=period, reason=reason)
        except BudgetError as exc:
            raise ExceptionValidationError("gpu_hours", exc.message) from None
        applied.append(
            {
                "node": target.pk,
                "path": target.label,
                "old": str(old),
                "new": str(old + increase),
                "added": str(increase),
            }
        )
    _note(
        request,
        now,
        "; ".join(f"{a['path']}: {a['old']} → {a['new']} GPU-hours" for a in applied)
        + f" for {period.label}.",
        actor,
    )
    return {
        "period_start": period.start.isoformat(),
        "period_end": period.end.isoformat(),
        "raised": applied,
    }


def topup_ends_at(now: dt.datetime) -> dt.datetime:
    return BudgetPeriod.current(now).end_at


def _end_topup(request, now) -> None:
    """Write the next period's grant back down by what the top-up added, bottom-up (children
    first, so a parent is never lowered below what its children hold). A grant someone has
    already set for that period is their decision and is left alone."""
    from budgets.services import set_grant

    effect = request.effect or {}
    if not effect.get("raised"):
        return
    ended = BudgetPeriod.containing(dt.date.fromisoformat(effect["period_start"]))
    following = BudgetPeriod.containing(ended.end)
    for entry in effect["raised"][::-1]:
        node = BudgetNode.objects.filter(pk=entry["node"]).first()
        if node is None or node.archived:
            continue
        if Grant.objects.filter(node=node, period_start=following.start).exists():
            _note(
                request,
                now,
                f"{node.label} already has a grant for {following.label}; left as set.",
            )
            continue
        current = _grants([node], following)[node.pk]
        target = max(current - Decimal(entry["added"]), Decimal("0"))
        try:
            with transaction.atomic():
                # Not refused for open liens: the top-up was for the period that ended, and a
                # run it funded that is still protected must not carry it on (liens are
                # counted for a grant set in advance neither); the consequence is noted.
                set_grant(
                    None,
                    node,
                    target,
                    period=following,
                    reason=f"{request.source} ended with {ended.label}: its top-up is not "
                    f"carried into {following.label}.",
                    count_liens=False,
                )
        except BudgetError as exc:
            _note(
                request,
                now,
                f"{node.label} could not be lowered for {following.label}: {exc.message}",
            )
            continue
        _note(
            request,
            now,
            f"{node.label}: {current} → {target} GPU-hours from "
            f"{following.label} (spent hours are not clawed back)."
            + _short_by_liens(node, following),
        )


def _short_by_liens(node, period) -> str:
    """The stated consequence when open liens exceed the lowered grant: the protected runs
    keep their protection and are paid from the new period's grant, the node starts it short,
    and no new start is funded there until its balance is above zero again."""
    from budgets.balances import HOUR, remaining_of

    [left] = remaining_of([node], period)
    if left >= 0:
        return ""
    return (
        f" Open liens of its running jobs hold more than that: those runs keep their "
        f"protection, paid from {period.label}'s grant, so {node.label} starts it "
        f"{Decimal(-left) / HOUR:,.2f} GPU-hours short, and no new start is funded there "
        "until its balance is above zero again."
    )
