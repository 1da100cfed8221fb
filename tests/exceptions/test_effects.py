"""Effects applied on activation and undone at expiry: protection, top-ups (with the parent's
limit and leadership's override), reservations as scheduler records; expiry under frozen time.
Protection across restarts is driven through the live loop in test_protection_path.py."""

import datetime as dt
from decimal import Decimal

import pytest
import time_machine
from django.utils import timezone

from budgets import services as budget_services
from budgets.balances import remaining_by_path, with_grants
from budgets.models import AuditEntry, BudgetNode, GpuType, Grant, Lien
from budgets.periods import BudgetPeriod
from exceptions import services
from exceptions.errors import ExceptionValidationError
from exceptions.models import ExceptionRequest
from exceptions.tasks import housekeeping
from scheduling.models import Job, JobEvent, Reservation
from tests.exceptions.conftest import running_job


def grant(node, period=None):
    period = period or BudgetPeriod.current()
    row = with_grants(BudgetNode.objects.filter(pk=node.pk), period).get()
    return Decimal(row.grant_in_force)


def test_approved_protection_extends_the_running_job_and_cites_the_exception(
    protection, job, cluster_admin
):
    request = protection(hours=12)
    services.approve_exception(cluster_admin, request.pk)
    job.refresh_from_db()
    assert job.protected_until == job.started_at + dt.timedelta(hours=12)
    assert job.protection_source == f"exception #{request.pk}"
    assert job.max_protection_s == 12 * 3600
    request.refresh_from_db()
    assert request.state == "active"
    assert "protected for 12 h" in request.events.filter(kind="effect").get().message


def test_extending_a_running_jobs_protection_grows_its_lien_by_the_extra_hours(
    protection, job, cluster_admin, budget_tree
):
    before = remaining_by_path()[budget_tree.olmo.path]
    lien = Lien.objects.get(job_ref=job.pk, released_at__isnull=True)
    assert lien.cost_gpu_seconds == 8 * 8 * 3600  # the start's 8 protected hours
    services.approve_exception(cluster_admin, protection(hours=12).pk)
    lien.refresh_from_db()
    assert lien.cost_gpu_seconds == 8 * 12 * 3600  # nothing charged yet: 12 h still to pay
    assert remaining_by_path()[budget_tree.olmo.path] == before - 8 * 4 * 3600


def test_an_extension_the_budget_cannot_hold_is_refused_and_nothing_changes(
    researcher, cluster_admin, budget_tree, cluster
):
    budget_services.set_grant(None, budget_tree.olmo, 70)  # 8 GPUs × 8 h held: 6 h left
    job = running_job(researcher, budget_tree.olmo, cluster)
    request = services.request_exception(
        researcher, "extended_protection", job=job.pk, hours=12, justification="Deadline."
    )
    events, audits = request.events.count(), AuditEntry.objects.count()
    with pytest.raises(ExceptionValidationError) as refused:
        services.approve_exception(cluster_admin, request.pk)
    assert refused.value.field == "hours"
    assert "nlp/olmo has 6.0 GPU-hours left; this needs 32.0 (26.0 short)" in refused.value.message
    request.refresh_from_db()
    assert request.state == "submitted" and not request.approvals.exists()
    assert request.events.count() == events and AuditEntry.objects.count() == audits
    job.refresh_from_db()
    assert job.protected_until == job.started_at + dt.timedelta(hours=8)
    assert (job.max_protection_s, job.protection_source) == (None, "contract")
    assert not JobEvent.objects.filter(job=job, kind="protection").exists()
    assert Lien.objects.get(job_ref=job.pk).cost_gpu_seconds == 8 * 8 * 3600
    assert remaining_by_path()[budget_tree.olmo.path] == 6 * 3600
    services.reject_exception(cluster_admin, request.pk, reason="no budget")  # still decidable


def test_an_extension_on_a_gpu_type_that_lost_its_price_is_refused_not_a_server_error(
    researcher, cluster_admin, budget_tree, cluster
):
    job = running_job(researcher, budget_tree.olmo, cluster)
    GpuType.objects.filter(name="H100").delete()  # an operator removed the price meanwhile
    request = services.request_exception(
        researcher, "extended_protection", job=job.pk, hours=12, justification="Deadline."
    )
    with pytest.raises(ExceptionValidationError) as refused:
        services.approve_exception(cluster_admin, request.pk)
    assert refused.value.field == "hours" and "has no cost factor" in refused.value.message
    request.refresh_from_db()
    job.refresh_from_db()
    assert request.state == "submitted"
    assert job.protected_until == job.started_at + dt.timedelta(hours=8)


def test_protection_expires_with_its_job_and_hands_it_back_to_its_contract(
    protection, job, cluster_admin
):
    request = protection()
    services.approve_exception(cluster_admin, request.pk)
    assert housekeeping()["expired"] == 0  # the job still runs in its protected window
    Job.objects.filter(pk=job.pk).update(state=Job.State.COMPLETED)
    assert housekeeping() == {"activated": 0, "expired": 1, "escalated": 0}
    assert housekeeping()["expired"] == 0  # safe to run twice
    request.refresh_from_db()
    job.refresh_from_db()
    assert request.state == "expired"
    assert (job.protection_source, job.max_protection_s) == ("contract", None)


def test_a_top_up_raises_the_grant_with_an_audit_row_citing_the_exception(
    topup, manager, budget_tree
):
    request = topup(gpu_hours=500)
    services.approve_exception(manager, request.pk)
    assert grant(budget_tree.olmo) == Decimal("3500")
    audit = AuditEntry.objects.filter(node=budget_tree.olmo).first()
    assert audit.actor == manager
    assert (audit.old, audit.new) == ("3000.00", "3500.00")
    assert f"exception #{request.pk}" in audit.reason


def test_a_top_up_that_would_exceed_the_parent_is_refused_and_nothing_changes(
    topup, manager, budget_tree, settings
):
    settings.ALLOT_EXCEPTION_SECOND_APPROVAL_GPU_HOURS = 10_000
    request = topup(gpu_hours=1500)  # nlp 6,000 holds olmo 3,000 + tulu 2,000: 1,000 free
    with pytest.raises(ExceptionValidationError) as refused:
        services.approve_exception(manager, request.pk)
    assert refused.value.field == "gpu_hours"
    assert "only leadership" in refused.value.message
    request.refresh_from_db()
    assert request.state == "submitted" and not request.approvals.exists()
    assert grant(budget_tree.olmo) == Decimal("3000")


def test_leadership_approving_at_the_top_raises_the_parent_too(
    topup, leader, budget_tree, settings
):
    settings.ALLOT_EXCEPTION_SECOND_APPROVAL_GPU_HOURS = 10_000
    request = topup(gpu_hours=1500)
    services.approve_exception(leader, request.pk)
    assert grant(budget_tree.olmo) == Decimal("4500")
    assert grant(budget_tree.nlp) == Decimal("6500")  # raised by the 500 it lacked
    assert grant(budget_tree.root) == Decimal("10000")  # root had 1,000 unallocated
    reasons = AuditEntry.objects.filter(reason__contains=f"exception #{request.pk}")
    assert reasons.count() == 2


def test_a_top_up_ends_with_its_period_without_clawing_back(topup, manager, budget_tree):
    request = topup(gpu_hours=500)
    services.approve_exception(manager, request.pk)
    request.refresh_from_db()
    period = BudgetPeriod.current()
    assert request.ends_at == period.end_at
    with time_machine.travel(period.end_at - dt.timedelta(minutes=1), tick=False):
        assert housekeeping()["expired"] == 0
    with time_machine.travel(period.end_at + dt.timedelta(minutes=1), tick=False):
        assert housekeeping()["expired"] == 1
        following = BudgetPeriod.current()
    request.refresh_from_db()
    assert request.state == "expired"
    assert grant(budget_tree.olmo, period) == Decimal("3500")  # the period it was for: kept
    assert grant(budget_tree.olmo, following) == Decimal("3000")
    assert Grant.objects.filter(node=budget_tree.olmo, period_start=following.start).exists()


def held(cluster, now):
    from scheduling.snapshot import _reservations

    return list(_reservations(cluster, now))


def test_an_approved_reservation_is_an_engine_input_from_approval_to_its_end(
    reservation, cluster, cluster_admin, budget_tree
):
    request = reservation(gpus=16, start_in_h=2, hours=6)
    now = timezone.now()
    assert held(cluster, now) == []
    services.approve_exception(cluster_admin, request.pk)
    request.refresh_from_db()
    assert request.state == "approved"  # its start has not come
    [one] = held(cluster, now)
    assert (one.cluster, one.gpus, one.project) == ("jupiter", 16, "nlp/olmo")
    assert one.start_s == request.starts_at.timestamp()
    with time_machine.travel(request.starts_at + dt.timedelta(seconds=1), tick=False):
        assert housekeeping()["activated"] == 1
        assert housekeeping()["activated"] == 0
    with time_machine.travel(request.ends_at + dt.timedelta(seconds=1), tick=False):
        assert housekeeping()["expired"] == 1
        assert held(cluster, timezone.now()) == []
    assert ExceptionRequest.objects.get(pk=request.pk).state == "expired"
    record = Reservation.objects.get(ref=f"exception-{request.pk}")  # the scheduler's own row
    assert record.released_at is not None and record.source == f"exception #{request.pk}"


def test_the_snapshot_hands_reservations_to_the_engine(reservation, cluster, cluster_admin):
    from scheduling.snapshot import build_snapshot

    request = reservation(gpus=8)
    services.approve_exception(cluster_admin, request.pk)
    snapshot = build_snapshot(cluster).snapshot
    assert [r.id for r in snapshot.reservations] == [f"exception-{request.pk}"]
