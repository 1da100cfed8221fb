"""The exception state machine: one function moves a request between states and records it.

    submitted → approved | rejected | withdrawn
    approved  → active                (its start has come; the effect is applied)
    active    → expired               (its end has come; the effect is undone)

Partial approvals (the first of two) and escalations are not states: they are rows
(`Approval`, `ExceptionEvent`) on a request that stays `submitted`.
"""

from __future__ import annotations

from datetime import datetime

from exceptions.errors import InvalidTransition
from exceptions.models import ExceptionEvent, ExceptionRequest, State
from scheduling.transitions import set_state_if_unchanged

ALLOWED: dict[str, frozenset[str]] = {
    State.SUBMITTED: frozenset({State.APPROVED, State.REJECTED, State.WITHDRAWN}),
    State.APPROVED: frozenset({State.ACTIVE}),
    State.ACTIVE: frozenset({State.EXPIRED}),
    State.REJECTED: frozenset(),
    State.WITHDRAWN: frozenset(),
    State.EXPIRED: frozenset(),
}


def can_move(current: str, target: str) -> bool:
    return target in ALLOWED.get(current, frozenset())


def transition(
    request: ExceptionRequest,
    target: str,
    *,
    at: datetime,
    actor=None,
    message: str = "",
    **fields,
) -> ExceptionRequest:
    """Move `request` to `target`, set `fields` and write one history event.

    Callers run inside a transaction and hold the row (`select_for_update`). The UPDATE is
    still conditional on the state the caller read (… WHERE state = read_state) and its row
    count is checked: where the lock is weaker than it looks (SQLite ignores it; a caller that
    read the row before locking), two approvers racing still produce exactly one transition —
    and so exactly one effect, since effects run only after a successful transition.
    """
    current = request.state
    if not can_move(current, target):
        raise InvalidTransition(f"exception #{request.pk} is {current}; it cannot become {target}.")
    if not set_state_if_unchanged(request, target, **fields):
        raise InvalidTransition(
            f"exception #{request.pk} was just changed by someone else (it is now "
            f"{request.state}); reload to see it."
        )
    ExceptionEvent.objects.create(
        request=request,
        at=at,
        actor=actor if getattr(actor, "pk", None) else None,
        kind=target,
        message=message,
    )
    return request
