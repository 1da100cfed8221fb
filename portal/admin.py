from django.contrib import admin

from portal.models import SsoIdentity


@admin.register(SsoIdentity)
class SsoIdentityAdmin(admin.ModelAdmin):
    """Explicit links of single sign-on identities to accounts (also ``manage.py sso_link``):
    the only way an existing account, staff or superuser above all, signs in through SSO."""

    list_display = ("user", "issuer", "subject", "linked_at", "last_login_at")
    search_fields = ("user__username", "subject", "issuer")
    raw_id_fields = ("user",)
    readonly_fields = ("linked_at", "last_login_at")
