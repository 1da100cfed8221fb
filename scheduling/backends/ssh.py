"""The ssh command line a backend runs its commands through, built here from structured options
(``ssh_host``, ``ssh_user``, ``ssh_port``, ``ssh_key``, ``ssh_known_hosts``), never taken as
free text. A free-text prefix let a staff user run any program on the worker: a program merely
*named* ssh (``/tmp/evil/ssh``), or real ssh with ``-oProxyCommand=`` or ``-oLocalCommand=``.

A legacy ``command_prefix`` is still read, but only when it is the bare program ``ssh`` with
the flags these options express (``-p``, ``-l``, ``-i``, ``-o BatchMode=yes`` and a
``[user@]host``); it is turned into the options and rebuilt, so both spellings run the same
command line. Anything else is refused, at registration and when the backend is built.

The command line: ``ssh -o BatchMode=yes`` (never a password prompt), forwarding and local
commands off, ``-p PORT``, ``-l USER``, ``-i KEY`` with ``IdentitiesOnly``, and with
``ssh_known_hosts`` that file and strict host key checking; then ``--`` and the host, so no
value can be read as an option. The remote command comes after, as one quoted argument
(scheduling.backends.command).
"""

from __future__ import annotations

import re
import shlex

from .base import BackendError

SSH_OPTIONS = ("ssh_host", "ssh_user", "ssh_port", "ssh_key", "ssh_known_hosts")
SSH_FILE_OPTIONS = ("ssh_key", "ssh_known_hosts")
# A DNS name or an IPv4 address (letters, digits, dots, hyphens; not starting with "-"), or
# an IPv6 address in brackets' content (hex digits and colons).
HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|[0-9A-Fa-f:]{2,39}")
USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
# ssh reads whitespace as a list separator and expands % and ~ in these paths.
PATH = re.compile(r"/[A-Za-z0-9._/-]*")
PREFIX_USAGE = (
    "command_prefix must be an ssh command (ssh [-o BatchMode=yes] [-p PORT] [-l USER] "
    "[-i KEY] [USER@]HOST); better, the options ssh_host, ssh_user, ssh_port, ssh_key"
)


def ssh_options(options: dict) -> dict[str, str]:
    """The structured ssh options of ``options``, a legacy ``command_prefix`` turned into
    them; {} when the backend runs its commands locally."""
    given = {key: str(options[key]) for key in SSH_OPTIONS if options.get(key) not in (None, "")}
    prefix = str(options.get("command_prefix") or "").strip()
    if not prefix:
        return given
    if given:
        raise BackendError("give either command_prefix or the ssh_* options, not both")
    return parse_legacy_prefix(prefix)


def parse_legacy_prefix(prefix: str) -> dict[str, str]:
    try:
        words = shlex.split(prefix)
    except ValueError:
        raise BackendError(PREFIX_USAGE) from None
    if not words or words[0] != "ssh":
        raise BackendError(PREFIX_USAGE)
    parsed: dict[str, str] = {}
    flags = {"-p": "ssh_port", "-l": "ssh_user", "-i": "ssh_key"}
    rest = words[1:]
    while len(rest) > 1:
        flag, value = rest[0], rest[1]
        if flag in flags and flags[flag] not in parsed:
            parsed[flags[flag]] = value
        elif flag == "-o" and value == "BatchMode=yes":
            pass  # always on
        else:
            raise BackendError(PREFIX_USAGE)
        rest = rest[2:]
    if len(rest) != 1:
        raise BackendError(PREFIX_USAGE)
    user, at, host = rest[0].rpartition("@")
    if at:
        if "ssh_user" in parsed:
            raise BackendError(PREFIX_USAGE)
        parsed["ssh_user"] = user
    parsed["ssh_host"] = host
    try:
        _check(parsed)
    except BackendError as exc:
        raise BackendError(f"{PREFIX_USAGE}: {exc}") from None
    return parsed


def _check(options: dict[str, str]) -> None:
    host = options.get("ssh_host", "")
    if not HOST.fullmatch(host):
        raise BackendError(f"ssh_host must be a host name or address, not {host[:80]!r}")
    user = options.get("ssh_user")
    if user is not None and not USER.fullmatch(user):
        raise BackendError(f"ssh_user must be a POSIX user name, not {user[:80]!r}")
    port = options.get("ssh_port")
    if port is not None and not (
        port.isascii() and port.isdigit() and len(port) <= 5 and 0 < int(port) < 65536
    ):
        raise BackendError(f"ssh_port must be a port number (1-65535), not {port[:80]!r}")
    for key in SSH_FILE_OPTIONS:
        value = options.get(key)
        if value is not None and not PATH.fullmatch(value):
            raise BackendError(
                f"{key} must be an absolute path of letters, digits and ._-/, not {value[:80]!r}"
            )


def ssh_prefix(options: dict) -> tuple[str, ...]:
    """The ssh command line for ``options`` (``()``: run locally), or :class:`BackendError`
    naming the option at fault."""
    given = ssh_options(options)
    if not given:
        return ()
    if "ssh_host" not in given:
        raise BackendError("ssh_host is needed with the other ssh_* options")
    _check(given)
    args = ["ssh", "-o", "BatchMode=yes", "-o", "PermitLocalCommand=no"]
    args += ["-o", "ForwardAgent=no", "-o", "ForwardX11=no", "-o", "ClearAllForwardings=yes"]
    if "ssh_port" in given:
        args += ["-p", given["ssh_port"]]
    if "ssh_user" in given:
        args += ["-l", given["ssh_user"]]
    if "ssh_key" in given:
        args += ["-o", "IdentitiesOnly=yes", "-i", given["ssh_key"]]
    if "ssh_known_hosts" in given:
        args += ["-o", f"UserKnownHostsFile={given['ssh_known_hosts']}"]
        args += ["-o", "StrictHostKeyChecking=yes"]
    return (*args, "--", given["ssh_host"])
