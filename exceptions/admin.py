"""Operators read requests, their approvals and history here; changes go through the pages
and the API, so the workflow's rules and effects cannot be skipped from the admin."""

from django.contrib import admin

from budgets.admin import ReadOnlyAdmin
from exceptions.models import Approval, ExceptionEvent, ExceptionRequest, Notification


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class ApprovalInline(ReadOnlyInline):
    model = Approval
    fields = ["approver", "tier", "at", "comment"]
    readonly_fields = fields


class EventInline(ReadOnlyInline):
    model = ExceptionEvent
    fields = ["at", "kind", "actor", "message"]
    readonly_fields = fields


@admin.register(ExceptionRequest)
class ExceptionRequestAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "kind",
        "state",
        "requester",
        "program",
        "submitted_at",
        "approvals_required",
        "escalation_level",
    ]
    list_filter = ["kind", "state"]
    search_fields = ["justification", "requester__username"]
    inlines = [ApprovalInline, EventInline]
    list_select_related = ["requester", "program"]


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ["user", "event", "message", "created_at", "read_at"]
    list_filter = ["event"]
    list_select_related = ["user"]
