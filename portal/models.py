from django.conf import settings
from django.db import models


class SsoIdentity(models.Model):
    """Who a single sign-on account is: the provider's (issuer, subject), never its username
    claim, which a provider lets its users choose or an administrator reuse. Made at a new
    subject's first sign-in with a new account, or by an explicit link to an existing one
    (``manage.py sso_link``, the admin; portal/sso/identities.py)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identities"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    linked_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "single sign-on identity"
        verbose_name_plural = "single sign-on identities"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="sso_identity_unique")
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
