from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from portal.sso import identities


class Command(BaseCommand):
    help = (
        "Link a single sign-on identity (issuer and subject, the provider's 'sub') to an "
        "existing account, the only way an existing staff or superuser account signs in "
        "through single sign-on. --unlink removes the link."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("subject", help="the provider's 'sub' claim for this person")
        parser.add_argument("--issuer", help="default: ALLOT_OIDC_ISSUER")
        parser.add_argument("--unlink", action="store_true")

    def handle(self, *args, username, subject, issuer, unlink, **kwargs):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"username: no user named {username!r}")
        issuer = (issuer or settings.ALLOT_OIDC_ISSUER or "").rstrip("/")
        if unlink:
            gone = user.sso_identities.filter(issuer=issuer, subject=subject).delete()[0]
            self.stdout.write(f"{username}: {'unlinked' if gone else 'was not linked'}")
            return
        try:
            identities.link(user, issuer, subject, by="sso_link command")
        except identities.LinkError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(self.style.SUCCESS(f"{username}: signs in as {subject} at {issuer}"))
