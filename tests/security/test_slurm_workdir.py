"""A Slurm job starts in its owner's home (or the cluster's configured directory), never in a
shared one: with ``--chdir=/tmp`` a module planted in /tmp by anyone on the cluster was the
first thing ``python`` imported."""

import os
import pwd
import subprocess

import pytest

from scheduling.backends.base import BackendError, LaunchSpec
from scheduling.backends.slurm import batch_script, sbatch_args


def spec(command="true") -> LaunchSpec:
    return LaunchSpec(7, "k", "train", "u", "", 1, ("n1",), 1, command, posix_user="alice")


def chdir_of(args: list[str]) -> str:
    [value] = [a.split("=", 1)[1] for a in args if a.startswith("--chdir=")]
    return value


def test_by_default_sbatch_gets_no_shared_directory():
    assert chdir_of(sbatch_args(spec(), "c", {})) == "/"


def test_a_configured_directory_is_per_user():
    args = sbatch_args(spec(), "c", {"workdir": "/scratch/{user}"})
    assert chdir_of(args) == "/scratch/alice"


@pytest.mark.parametrize("workdir", ["scratch/{user}", "/scratch/{other}"])
def test_a_relative_or_malformed_directory_is_refused(workdir):
    with pytest.raises(BackendError, match="workdir"):
        sbatch_args(spec(), "c", {"workdir": workdir})


def test_by_default_the_script_moves_to_the_owners_home_before_anything_else(tmp_path):
    script = batch_script(spec("pwd"))
    result = subprocess.run(
        ["sh", "-s"], input=script, capture_output=True, text=True, env={}, cwd="/tmp", timeout=10
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)


def test_with_a_configured_directory_the_script_stays_where_sbatch_put_it():
    script = batch_script(spec("pwd"), workdir="/scratch/{user}")
    assert "getent" not in script
