"""The state machine: every allowed transition, every refused one, and the race between two
approvers resolved by the conditional UPDATE."""

import itertools

import pytest
from django.utils import timezone

from exceptions import services
from exceptions.errors import InvalidTransition
from exceptions.models import ExceptionRequest, State
from exceptions.workflow import ALLOWED, transition
from scheduling.models import JobEvent

EXPECTED = {
    ("submitted", "approved"),
    ("submitted", "rejected"),
    ("submitted", "withdrawn"),
    ("approved", "active"),
    ("active", "expired"),
}
ALL_PAIRS = list(itertools.product(State.values, State.values))


def test_the_allowed_transitions_are_exactly_the_documented_ones():
    allowed = {(a, b) for a, targets in ALLOWED.items() for b in targets}
    assert allowed == EXPECTED


@pytest.mark.parametrize("current,target", sorted(EXPECTED))
def test_each_allowed_transition_moves_the_request_and_records_it(current, target, topup, leader):
    request = topup()
    ExceptionRequest.objects.filter(pk=request.pk).update(state=current)
    request.refresh_from_db()
    transition(request, target, at=timezone.now(), actor=leader, message="because")
    request.refresh_from_db()
    assert request.state == target
    last = request.events.last()
    assert (last.kind, last.actor, last.message) == (target, leader, "because")


@pytest.mark.parametrize("current,target", sorted(set(ALL_PAIRS) - EXPECTED))
def test_each_other_transition_is_refused_naming_the_state_field(current, target, topup):
    request = topup()
    ExceptionRequest.objects.filter(pk=request.pk).update(state=current)
    request.refresh_from_db()
    events = request.events.count()
    with pytest.raises(InvalidTransition) as refused:
        transition(request, target, at=timezone.now())
    assert refused.value.field == "state"
    request.refresh_from_db()
    assert request.state == current
    assert request.events.count() == events


def test_a_transition_from_a_stale_read_is_refused_and_changes_nothing(topup):
    request = topup()
    first, second = (ExceptionRequest.objects.get(pk=request.pk) for _ in range(2))
    transition(first, State.APPROVED, at=timezone.now())
    with pytest.raises(InvalidTransition, match="changed by someone else"):
        transition(second, State.REJECTED, at=timezone.now())
    assert ExceptionRequest.objects.get(pk=request.pk).state == State.APPROVED


def test_two_approvers_at_once_apply_the_effect_once(
    protection, job, cluster_admin, leader, monkeypatch
):
    """Simulates the race where both approvers read the request as submitted (the row lock is
    a no-op on SQLite): the conditional UPDATE lets one through, the other is refused, and the
    protection is applied once."""
    request = protection()
    stale = ExceptionRequest.objects.select_related("requester", "scope", "job").get(pk=request.pk)
    real_locked = services._locked
    services.approve_exception(cluster_admin, request.pk)
    stale_copy = ExceptionRequest.objects.select_related("requester", "scope", "job").get(
        pk=request.pk
    )
    stale_copy.state = stale.state  # what the second approver read before the first committed
    stale_copy.approvals_required = 1
    monkeypatch.setattr(services, "_locked", lambda pk: stale_copy)
    with pytest.raises(InvalidTransition):
        services.approve_exception(leader, request.pk)
    monkeypatch.setattr(services, "_locked", real_locked)
    assert JobEvent.objects.filter(job=job, kind="protection").count() == 1
    request.refresh_from_db()
    assert request.state == State.ACTIVE
    assert request.approvals.count() == 1
    assert request.events.filter(kind=State.APPROVED).count() == 1


def test_a_second_approval_after_the_decision_is_refused(protection, cluster_admin, leader, job):
    request = protection()
    services.approve_exception(cluster_admin, request.pk)
    with pytest.raises(InvalidTransition):
        services.approve_exception(leader, request.pk)
    assert JobEvent.objects.filter(job=job, kind="protection").count() == 1
