"""``command_prefix=ssh …`` through a real sshd: the loopback one scripts/identity-up.sh starts
(127.0.0.1:2222, key-only; slurm-up.sh runs it, CI runs slurm-up.sh). The remote shell parses
the command line again, so every argument must arrive whole — spaces, quotes and ``;`` included —
and nothing in a job's command may run on the login node."""

import os
import shlex
from pathlib import Path

import pytest

from scheduling.backends.command import CommandRunner
from tests.conftest import service_missing, tcp_open

pytestmark = pytest.mark.slurm  # the harness (scripts/slurm-up.sh) starts the sshd

STATE = Path(os.environ.get("SLURM_STATE_DIR", "/var/lib/allot-slurm"))
KEY = STATE / "ssh" / "id_ed25519"
PORT = int(os.environ.get("SSH_PORT", "2222"))


def ssh_prefix(user: str = "root") -> str:
    return shlex.join(
        [
            "ssh",
            "-i",
            str(KEY),
            "-p",
            str(PORT),
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            f"{user}@127.0.0.1",
        ]
    )


@pytest.fixture
def sshd():
    if not KEY.exists() or not os.access(KEY, os.R_OK) or not tcp_open("127.0.0.1", PORT):
        service_missing(f"no test sshd on 127.0.0.1:{PORT} (run scripts/slurm-up.sh as root)")
    return ssh_prefix


def test_through_ssh_a_command_with_spaces_quotes_and_a_semicolon_stays_one_argument(
    sshd, tmp_path
):
    marker = tmp_path / "ran-on-the-login-node"
    tricky = f"""python train.py --name 'a b' "c'd" $HOME; touch {marker} `id`"""
    result = CommandRunner(prefix=sshd()).run(["printf", "%s\\n", tricky, "two words"])
    assert result.stdout.splitlines() == [tricky, "two words"]
    assert not marker.exists()


def test_through_ssh_the_remote_command_sees_none_of_the_workers_variables(sshd, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://secret")
    monkeypatch.setenv("LC_ALLOT_SECRET", "secret")  # ssh forwards LC_* by default on Debian
    result = CommandRunner(prefix=sshd()).run(["env"])
    assert "secret" not in result.stdout
