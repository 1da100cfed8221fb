"""Operators' view of the budget data. Grants, the tree, the ledger and the audit trail are
read-only here: they change only through the services (the budgeting page and the API), so
that every change is validated and audited. Roles and GPU cost factors are edited here (a cost
factor through its audited service)."""

from django import forms
from django.contrib import admin

from budgets.models import AuditEntry, BudgetNode, GpuType, Grant, Lien, Role, UsageEntry
from budgets.prices import set_gpu_price


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(BudgetNode)
class BudgetNodeAdmin(ReadOnlyAdmin):
    list_display = ["slug_path", "name", "depth", "weight", "archived"]
    list_filter = ["archived", "depth"]
    search_fields = ["name", "slug_path"]
    ordering = ["path"]


@admin.register(Grant)
class GrantAdmin(ReadOnlyAdmin):
    list_display = ["node", "period_start", "gpu_hours", "version", "updated_at"]
    list_filter = ["period_start"]
    list_select_related = ["node"]


@admin.register(UsageEntry)
class UsageEntryAdmin(ReadOnlyAdmin):
    list_display = ["node", "job_ref", "user", "gpu_type", "interval_start", "cost_gpu_seconds"]
    list_filter = ["gpu_type"]
    list_select_related = ["node", "user", "gpu_type"]
    date_hierarchy = "interval_start"


@admin.register(Lien)
class LienAdmin(ReadOnlyAdmin):
    list_display = ["job_ref", "node", "cost_gpu_seconds", "charged_gpu_seconds", "released_at"]
    list_select_related = ["node"]


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ["at", "actor", "action", "node", "field", "old", "new", "reason"]
    list_filter = ["action"]
    list_select_related = ["actor", "node"]


class GpuTypeForm(forms.ModelForm):
    class Meta:
        model = GpuType
        fields = ["name", "cost_factor"]

    def clean(self):
        if not BudgetNode.objects.get_root_nodes().exists():
            raise forms.ValidationError(
                "Create the organisation's root first: prices are audited there."
            )
        return super().clean()


@admin.register(GpuType)
class GpuTypeAdmin(admin.ModelAdmin):
    """A price is saved through the audited service. The name is fixed once saved: renaming a
    type would unprice every node of the old name."""

    form = GpuTypeForm
    list_display = ["name", "cost_factor"]

    def get_readonly_fields(self, request, obj=None):
        return ["name"] if obj is not None else []

    def save_model(self, request, obj, form, change):
        obj.pk = set_gpu_price(request.user, obj.name, obj.cost_factor, reason="admin").pk


@admin.register(Role)
class RoleAdmin(admin.ModelAdmin):
    list_display = ["user", "role", "node"]
    list_filter = ["role"]
    list_select_related = ["user", "node"]
    autocomplete_fields = ["user"]
    search_fields = ["user__username", "node__slug_path"]
