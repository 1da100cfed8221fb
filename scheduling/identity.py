"""Who a job runs as on a cluster: its owner's POSIX account (ARCHITECTURE.md, "Identity on the
clusters"). Slurm and Kubernetes clusters need one; simulated clusters do not."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from scheduling.errors import JobValidationError
from scheduling.job_accounts import refusal
from scheduling.models import Cluster, PosixAccount

REAL_BACKENDS = (Cluster.Backend.SLURM, Cluster.Backend.KUBERNETES)


def account_of(user) -> PosixAccount | None:
    return PosixAccount.objects.filter(user=user).first()


def problem(user, cluster: Cluster) -> str:
    """Why ``user``'s jobs cannot run on ``cluster`` as their own account ("" when they can)."""
    if cluster.backend not in REAL_BACKENDS:
        return ""
    account = account_of(user)
    if account is None:
        return (
            f"cluster {cluster.name} runs jobs as their owner's POSIX account and "
            f"{user.get_username()} has none; ask an administrator to set one "
            "(manage.py posix_account)"
        )
    refused = refusal(account.name, account.uid)
    if account.name == (cluster.options or {}).get("service_user"):
        refused = ("name", f"{account.name} is this cluster's service account (service_user)")
    if refused:
        return f"cluster {cluster.name}: {user.get_username()}'s POSIX account: {refused[1]}"
    if cluster.backend == Cluster.Backend.KUBERNETES and (account.uid is None or not account.gid):
        return (
            f"cluster {cluster.name} runs pods as their owner's uid and gid, and "
            f"{user.get_username()}'s POSIX account {account.name} has none set"
        )
    return ""


def check_can_submit(user, cluster: Cluster) -> None:
    """Refuse a submission to a real cluster by a user without a POSIX account (400, cluster)."""
    why = problem(user, cluster)
    if why:
        raise JobValidationError("cluster", why)


@transaction.atomic
def set_account(user, name: str, uid: int | None = None, gid: int | None = None) -> PosixAccount:
    account = PosixAccount.objects.filter(user=user).first() or PosixAccount(user=user)
    account.name, account.uid, account.gid = name, uid, gid
    try:
        account.full_clean()
    except ValidationError as exc:
        field, messages = next(iter(exc.message_dict.items()))
        raise JobValidationError(field, "; ".join(messages)) from exc
    account.save()
    return account


def clear_account(user) -> bool:
    return PosixAccount.objects.filter(user=user).delete()[0] > 0
