"""A partition Allot governs must take work only through Allot: `register_cluster` reads
`scontrol show partition` and warns when researchers could sbatch there around it. Captured
from the harness (tests/backends/fixtures/slurm/capture.sh); no Slurm needed."""

from pathlib import Path

import pytest
from django.core.management import call_command

from scheduling.backends.command import CommandResult, CommandRunner
from scheduling.backends.slurm import SlurmBackend
from scheduling.backends.slurm_partition import parse_scontrol_partitions, side_door

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def partitions() -> dict[str, dict[str, str]]:
    return parse_scontrol_partitions(
        fixture("scontrol_show_partition.txt") + fixture("scontrol_show_partition_gated.txt")
    )


def test_the_captured_partitions_are_read_with_who_may_submit():
    found = partitions()
    assert set(found) == {"gpu", "high", "allot-gated", "allot-groups"}
    assert found["gpu"]["AllowAccounts"] == found["gpu"]["AllocNodes"] == "ALL"
    assert found["allot-gated"]["AllocNodes"] == "allot-submit"
    assert found["allot-gated"]["AllowAccounts"] == "allot"
    assert found["allot-groups"]["AllowGroups"] == "allot-jobs"
    assert found["gpu"]["Nodes"] == "node[1-2]"


def test_a_partition_open_to_everyone_is_named_with_what_opens_it():
    warning = side_door("gpu", partitions()["gpu"])
    assert warning is not None
    assert "partition gpu is open to everyone" in warning
    for setting in ("AllowAccounts=ALL", "AllowGroups=ALL", "AllowQos=ALL", "AllocNodes=ALL"):
        assert setting in warning


def test_membership_rules_alone_still_let_a_member_sbatch_around_allot():
    warning = side_door("allot-groups", partitions()["allot-groups"])
    assert warning is not None
    assert "AllowGroups=allot-jobs" in warning and "AllocNodes" in warning
    assert "open to everyone" not in warning


def test_a_partition_taking_submissions_only_from_allots_host_is_not_warned_about():
    assert side_door("allot-gated", partitions()["allot-gated"]) is None


def _answers(self, args, *, check=True, timeout_s=None, input=None):  # noqa: A002
    """The Slurm clients, answering from the captured outputs."""
    args = list(args)
    if args[:2] == ["sinfo", "--json"]:
        return CommandResult(tuple(args), 0, fixture("sinfo.json"), "", 0.0)
    if args[:3] == ["scontrol", "show", "partition"]:
        name = args[3] if len(args) == 5 else None
        lines = [
            line
            for line in fixture("scontrol_show_partition.txt").splitlines()
            if name is None or line.startswith(f"PartitionName={name} ")
        ]
        if not lines:
            return CommandResult(
                tuple(args), 1, fixture("scontrol_show_partition_missing.txt"), "", 0.0
            )
        return CommandResult(tuple(args), 0, "\n".join(lines) + "\n", "", 0.0)
    raise AssertionError(f"unexpected command {args}")


def test_the_backend_warns_about_its_partition_and_says_when_it_cannot_read_it(monkeypatch):
    monkeypatch.setattr(CommandRunner, "run", _answers)

    (open_door,) = SlurmBackend("hpc", {"partition": "gpu"}).access_warnings()
    (unknown,) = SlurmBackend("hpc", {"partition": "nosuch"}).access_warnings()

    assert "partition gpu is open to everyone" in open_door
    assert "nosuch" in unknown and "not found" in unknown


@pytest.mark.django_db
def test_register_cluster_warns_when_the_governed_partition_is_open(
    budget_tree, monkeypatch, capsys
):
    monkeypatch.setattr(CommandRunner, "run", _answers)

    call_command(
        "register_cluster", "hpc", "--backend", "slurm",
        "--option", "partition=gpu", "--price", "gpu=1.0",
    )  # fmt: skip

    out, err = capsys.readouterr()
    assert "2 nodes, 16 GPUs" in out  # registered all the same
    assert "partition gpu is open to everyone" in err
    assert "AllocNodes" in err and "docs/slurm.md" in err
