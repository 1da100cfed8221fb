from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from scheduling import identity
from scheduling.errors import JobValidationError


class Command(BaseCommand):
    help = (
        "Set (or --clear) the POSIX account a user's jobs run as on Slurm and Kubernetes "
        "clusters. --uid/--gid are needed for Kubernetes (runAsUser/runAsGroup)."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("posix_name", nargs="?")
        parser.add_argument("--uid", type=int)
        parser.add_argument("--gid", type=int)
        parser.add_argument("--clear", action="store_true", help="remove the user's account")

    def handle(self, *args, username, posix_name, uid, gid, clear, **kwargs):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"username: no user named {username!r}")
        if clear:
            if posix_name or uid is not None or gid is not None:
                raise CommandError("--clear takes only the username")
            done = identity.clear_account(user)
            self.stdout.write(f"{username}: POSIX account {'removed' if done else 'was not set'}")
            return
        if not posix_name:
            raise CommandError("posix_name: give the POSIX account name (or --clear)")
        if (uid is None) != (gid is None):
            raise CommandError("give both --uid and --gid, or neither")
        try:
            account = identity.set_account(user, posix_name, uid, gid)
        except JobValidationError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(self.style.SUCCESS(f"{username}: jobs run as {account}"))
