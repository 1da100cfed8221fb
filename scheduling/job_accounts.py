"""Accounts a job may never run as (ARCHITECTURE.md, "Identity on the clusters").

A job is someone else's code; run as Allot's service account it could read Allot's secrets,
database and broker and submit as anyone; run as root or a system account (a daemon's, a
package's) it owns the node. So a job's account is refused when it is:

1. root, by name or by uid 0;
2. Allot's service account: ``ALLOT_SERVICE_USER`` (the account the worker is configured to
   run as on the clusters) and whoever this process runs as, looked up in the password
   database, never taken from the environment;
3. a system account: a uid below ``ALLOT_MIN_JOB_UID`` (1000 by default, Debian's and Red
   Hat's first user uid), given explicitly or found for the name in this host's password
   database; and the well-known shared ``nobody``.

Checked by the model (so the admin and every service that saves an account), and again when a
job is submitted and when it starts, so an account stored before the settings changed cannot
run either. Settings are read at call time.
"""

from __future__ import annotations

import os
import pwd

from django.conf import settings

ALWAYS_REFUSED = frozenset({"root", "nobody"})


def service_accounts() -> set[str]:
    names = {getattr(settings, "ALLOT_SERVICE_USER", "") or ""}
    try:
        names.add(pwd.getpwuid(os.getuid()).pw_name)
    except KeyError:  # pragma: no cover - a uid without a passwd entry (some containers)
        pass
    return {name for name in names if name}


def min_uid() -> int:
    return int(getattr(settings, "ALLOT_MIN_JOB_UID", 1000))


def refusal(name: str, uid: int | None) -> tuple[str, str] | None:
    """``(field, message)`` when jobs must never run as this account, else None."""
    if name in ALWAYS_REFUSED:
        return "name", f"jobs never run as {name}"
    if name in service_accounts():
        return "name", f"{name} is Allot's service account; jobs never run as it"
    if uid is not None and uid == os.getuid():
        return "uid", f"uid {uid} is Allot's service account's; jobs never run as it"
    if uid is not None and uid < min_uid():
        return "uid", f"uid {uid} is a system account's (jobs need a uid of {min_uid()} or more)"
    try:
        local = pwd.getpwnam(name).pw_uid
    except (KeyError, ValueError):
        return None
    if local < min_uid():
        return "name", f"{name} is a system account here (uid {local}); jobs never run as it"
    return None
