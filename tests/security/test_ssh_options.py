"""The worker reaches a Slurm submit host over ssh built in code from ``ssh_host``,
``ssh_user``, ``ssh_port``, ``ssh_key`` and ``ssh_known_hosts``: no free-text program and no
free-text ssh option. ``command_prefix="/tmp/evil/ssh x"`` passed because only the program's
name was checked, and ``ssh -oProxyCommand=...`` or ``-oLocalCommand=...`` ran any program on
the worker. A legacy ``command_prefix`` is read only when it is plain ``ssh`` with the flags
the structured options express."""

import json

import pytest
from django.core.management import CommandError, call_command

from scheduling.backends.base import BackendError
from scheduling.backends.slurm import SlurmBackend
from scheduling.backends.ssh import ssh_prefix
from scheduling.discovery import check_options
from scheduling.errors import JobValidationError
from scheduling.models import Cluster

EVIL = [
    "/tmp/evil/ssh x",
    "./ssh login",
    "ssh -oProxyCommand=touch${IFS}/tmp/pwned login",
    "ssh -o ProxyCommand=sh login",
    "ssh -oLocalCommand=id -oPermitLocalCommand=yes login",
    "ssh -F /tmp/evil.conf login",
    "ssh -o BatchMode=yes -- -oProxyCommand=x",
    "ssh login; touch /tmp/pwned",
    "ssh -o BatchMode=yes allot@login extra-argument",
    "sh -c",
]


@pytest.mark.parametrize("prefix", EVIL)
def test_a_prefix_that_is_more_than_plain_ssh_is_refused_everywhere(prefix, settings, tmp_path):
    settings.ALLOT_CLUSTER_FILES_DIR = str(tmp_path)
    with pytest.raises(JobValidationError, match="command_prefix must be an ssh command"):
        check_options("slurm", {"command_prefix": prefix})
    with pytest.raises(BackendError, match="command_prefix"):
        SlurmBackend("x", {"command_prefix": prefix})


def test_the_register_command_refuses_it_and_saves_nothing(db, settings, tmp_path):
    settings.ALLOT_CLUSTER_FILES_DIR = str(tmp_path)
    with pytest.raises(CommandError, match="command_prefix"):
        call_command(
            "register_cluster", "venus", "--backend", "slurm",
            "--option=command_prefix=ssh -oProxyCommand=id login",
        )  # fmt: skip
    assert not Cluster.objects.exists()


def test_the_admin_refuses_it(admin_client, settings, tmp_path):
    settings.ALLOT_CLUSTER_FILES_DIR = str(tmp_path)
    response = admin_client.post(
        "/admin/scheduling/cluster/add/",
        {
            "name": "venus",
            "backend": "slurm",
            "options": json.dumps({"command_prefix": "/tmp/evil/ssh login"}),
            "interactive_pool_gpus": 0,
        },
    )
    assert "command_prefix must be an ssh command" in response.content.decode()
    assert not Cluster.objects.exists()


def test_the_ssh_command_line_is_built_from_the_structured_options(tmp_path):
    key, known = tmp_path / "id_ed25519", tmp_path / "known_hosts"
    prefix = ssh_prefix(
        {
            "ssh_host": "slurm-login.example.org",
            "ssh_user": "allot",
            "ssh_port": "2222",
            "ssh_key": str(key),
            "ssh_known_hosts": str(known),
        }
    )
    assert prefix[0] == "ssh"
    assert prefix[-2:] == ("--", "slurm-login.example.org")
    assert ("-p", "2222") == prefix[prefix.index("-p") : prefix.index("-p") + 2]
    assert ("-l", "allot") == prefix[prefix.index("-l") : prefix.index("-l") + 2]
    assert str(key) in prefix and f"UserKnownHostsFile={known}" in prefix
    assert "BatchMode=yes" in prefix and "PermitLocalCommand=no" in prefix
    assert "StrictHostKeyChecking=yes" in prefix
    assert not any("Proxy" in part for part in prefix)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"ssh_host": "-oProxyCommand=id"}, "ssh_host"),
        ({"ssh_host": "login", "ssh_user": "-oProxyCommand=id"}, "ssh_user"),
        ({"ssh_host": "login", "ssh_user": "allot\n"}, "ssh_user"),
        ({"ssh_host": "login", "ssh_port": "22 -oProxyCommand=id"}, "ssh_port"),
        ({"ssh_host": "login", "ssh_port": "70000"}, "ssh_port"),
        ({"ssh_host": "login", "ssh_key": "/etc/allot/k -oProxyCommand=id"}, "ssh_key"),
        ({"ssh_host": "login", "ssh_known_hosts": "/etc/allot/%d"}, "ssh_known_hosts"),
        ({"ssh_user": "allot"}, "ssh_host"),
    ],
)
def test_each_structured_option_is_checked(options, says):
    with pytest.raises(BackendError, match=says):
        ssh_prefix(options)


def test_the_key_files_must_sit_in_the_cluster_files_directory(settings, tmp_path):
    settings.ALLOT_CLUSTER_FILES_DIR = str(tmp_path)
    with pytest.raises(JobValidationError, match="ssh_key must be a file inside"):
        check_options("slurm", {"ssh_host": "login", "ssh_key": "/root/.ssh/id_rsa"})
    check_options("slurm", {"ssh_host": "login", "ssh_key": str(tmp_path / "id_ed25519")})


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("ssh allot@login", {"ssh_host": "login", "ssh_user": "allot"}),
        (
            "ssh -o BatchMode=yes -p 2222 -l allot login.example.org",
            {"ssh_host": "login.example.org", "ssh_user": "allot", "ssh_port": "2222"},
        ),
    ],
)
def test_a_plain_legacy_prefix_still_works_as_the_structured_options(prefix, expected):
    check_options("slurm", {"command_prefix": prefix})
    assert ssh_prefix({"command_prefix": prefix}) == ssh_prefix(expected)
    assert SlurmBackend("x", {"command_prefix": prefix}).runner.prefix == ssh_prefix(expected)


@pytest.mark.django_db
def test_the_migration_turns_a_plain_legacy_prefix_into_the_structured_options():
    from importlib import import_module

    from django.apps import apps

    migration = import_module("scheduling.migrations.0011_cluster_ssh_options")
    plain = Cluster.objects.create(
        name="a",
        backend="slurm",
        options={"command_prefix": "ssh -p 2222 allot@login", "partition": "gpu"},
    )  # noqa: E501
    evil = Cluster.objects.create(
        name="b", backend="slurm", options={"command_prefix": "ssh -oProxyCommand=id login"}
    )  # noqa: E501
    migration.to_ssh_options(apps, None)
    plain.refresh_from_db()
    evil.refresh_from_db()
    assert plain.options == {
        "partition": "gpu", "ssh_host": "login", "ssh_user": "allot", "ssh_port": "2222",
    }  # fmt: skip
    assert evil.options == {"command_prefix": "ssh -oProxyCommand=id login"}
