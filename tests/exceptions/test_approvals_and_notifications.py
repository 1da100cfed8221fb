"""Second approval for large asks, escalation of stale requests, and who is told what (email
and the in-app badge)."""

import datetime as dt

import pytest
import time_machine
from django.core import mail
from django.utils import timezone

from exceptions import notifications, services
from exceptions.errors import ExceptionValidationError
from exceptions.tasks import housekeeping


def test_a_large_protection_needs_a_second_distinct_approver(
    protection, cluster_admin, leader, settings
):
    settings.ALLOT_EXCEPTION_SECOND_APPROVAL_HOURS = 10
    request = protection(hours=12)
    assert request.approvals_required == 2
    services.approve_exception(cluster_admin, request.pk)
    request.refresh_from_db()
    assert request.state == "submitted"
    with pytest.raises(ExceptionValidationError) as twice:
        services.approve_exception(cluster_admin, request.pk)
    assert twice.value.field == "approver"
    services.approve_exception(leader, request.pk)
    request.refresh_from_db()
    assert request.state == "active"
    assert sorted(a.approver.username for a in request.approvals.all()) == [
        "cluster_admin",
        "leader",
    ]


def test_thresholds_are_read_at_call_time(protection, settings):
    settings.ALLOT_EXCEPTION_SECOND_APPROVAL_HOURS = 24
    assert protection(hours=12).approvals_required == 1


def test_a_large_top_up_needs_two_approvals(topup, manager, leader, budget_tree, settings):
    settings.ALLOT_EXCEPTION_SECOND_APPROVAL_GPU_HOURS = 400
    request = topup(gpu_hours=500)
    services.approve_exception(manager, request.pk)
    request.refresh_from_db()
    assert request.state == "submitted"
    services.approve_exception(leader, request.pk)
    request.refresh_from_db()
    assert request.state == "active"


def test_a_stale_request_escalates_once_to_leadership(topup, leader, manager, settings):
    settings.ALLOT_EXCEPTION_ESCALATE_AFTER_H = 24
    request = topup()
    assert request.escalation_level == 0
    mail.outbox.clear()
    with time_machine.travel(timezone.now() + dt.timedelta(hours=23), tick=False):
        assert housekeeping()["escalated"] == 0
    with time_machine.travel(timezone.now() + dt.timedelta(hours=25), tick=False):
        assert housekeeping()["escalated"] == 1
        assert housekeeping()["escalated"] == 0  # safe to run twice
    request.refresh_from_db()
    assert request.escalation_level == 1
    assert request.events.filter(kind="escalation").count() == 1
    assert leader.exception_notifications.filter(event="escalated", request=request).exists()
    assert not manager.exception_notifications.filter(event="escalated").exists()


def test_requests_email_the_approvers_and_decisions_email_the_requester(
    protection, cluster_admin, researcher, leader, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        request = protection()
    [asked] = mail.outbox
    assert asked.to == ["cluster_admin@example.org"]
    assert f"Exception #{request.pk}" in asked.subject
    assert f"/exceptions/{request.pk}/" in asked.body
    assert notifications.unread_count(cluster_admin) == 1
    assert notifications.unread_count(leader) == 0  # not asked until escalation
    with django_capture_on_commit_callbacks(execute=True):
        services.approve_exception(cluster_admin, request.pk)
    decided = mail.outbox[-1]
    assert decided.to == ["researcher@example.org"]
    assert "approved" in decided.subject
    assert notifications.unread_count(researcher) == 1


def test_rejection_and_expiry_are_notified(
    protection, topup, manager, researcher, django_capture_on_commit_callbacks
):
    request = topup()
    with django_capture_on_commit_callbacks(execute=True):
        services.reject_exception(manager, request.pk, reason="use the tulu slack")
    assert "use the tulu slack" in mail.outbox[-1].body
    kept = topup(gpu_hours=100)
    services.approve_exception(manager, kept.pk)
    kept.refresh_from_db()
    with time_machine.travel(kept.ends_at + dt.timedelta(minutes=1), tick=False):
        with django_capture_on_commit_callbacks(execute=True):
            housekeeping()
    assert mail.outbox[-1].to == ["researcher@example.org"]
    assert "expired" in mail.outbox[-1].subject
    assert researcher.exception_notifications.filter(event="expired").exists()


def test_a_refused_decision_emails_nobody(
    topup, manager, settings, django_capture_on_commit_callbacks
):
    settings.ALLOT_EXCEPTION_SECOND_APPROVAL_GPU_HOURS = 10_000
    request = topup(gpu_hours=1500)
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(ExceptionValidationError):
        services.approve_exception(manager, request.pk)
    assert mail.outbox == []


def test_the_inbox_badge_counts_unread_and_clears_when_read(client, protection, cluster_admin):
    protection()
    client.force_login(cluster_admin)
    page = client.get("/exceptions/")
    assert "1 unread" in page.content.decode()
    client.post("/exceptions/notifications/read/")
    assert notifications.unread_count(cluster_admin) == 0
    assert "unread" not in client.get("/exceptions/").content.decode().split("<h1>")[1][:80]
