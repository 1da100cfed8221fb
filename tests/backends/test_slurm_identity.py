"""Jobs run as their owner, with nothing of Allot's environment, and Allot trusts only the
Slurm jobs it made — on the real slurmctld of scripts/slurm-up.sh, with the Unix users, the
sudoers rule and the loopback sshd that scripts/identity-up.sh (run by slurm-up.sh) prepares:
``allot`` (the service account), ``allot-alice`` and ``allot-bob`` (researchers)."""

import logging
import os
import pwd
import subprocess
import tempfile
from pathlib import Path

import pytest

from scheduling.backends.base import RemoteState
from tests.backends.test_slurm_cluster import _backend, launch, wait_for
from tests.backends.test_ssh_prefix import KEY, PORT, ssh_prefix
from tests.conftest import service_missing, tcp_open

pytestmark = pytest.mark.slurm

ALICE, BOB, SERVICE = "allot-alice", "allot-bob", "allot"
LEAKS = ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL", "SECRET", "ALLOT_")


def users_exist():
    for name in (ALICE, BOB, SERVICE):
        try:
            pwd.getpwnam(name)
        except KeyError:
            service_missing(f"no Unix user {name} (run scripts/slurm-up.sh as root)")


@pytest.fixture
def slurm(monkeypatch):
    users_exist()
    # What a worker's environment holds; none of it may reach a job.
    monkeypatch.setenv("DATABASE_URL", "postgres://allot:hunter2@db/allot")
    monkeypatch.setenv("REDIS_URL", "redis://secret-broker:6379/0")
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "portal.settings")
    monkeypatch.setenv("ALLOT_SECRET_KEY", "do-not-leak")
    for backend in _backend(exclusive=False):
        backend.secret = b"identity-test-secret"
        yield backend


@pytest.fixture
def shared_dir():
    """A directory every test user can write (the jobs run as them, not as root)."""
    path = Path(tempfile.mkdtemp(prefix="allot-identity-", dir="/tmp"))
    path.chmod(0o1777)
    return path


def job_output(path: Path, timeout=30.0) -> str:
    assert wait_for(lambda: path.exists() and "END" in path.read_text(), timeout), (
        f"the job never wrote {path}"
    )
    return path.read_text()


def report_command(out: Path) -> str:
    return f"{{ id -un; env; echo END; }} > {out}"


def test_a_job_runs_as_its_owners_account_with_none_of_allots_environment(slurm, shared_dir):
    out = shared_dir / "report"
    remote = slurm.submit(launch(command=report_command(out), posix_user=ALICE))
    text = job_output(out)
    assert text.splitlines()[0] == ALICE
    assert out.stat().st_uid == pwd.getpwnam(ALICE).pw_uid
    for leak in LEAKS:
        assert leak not in text, f"{leak} reached the job"
    assert "hunter2" not in text and "do-not-leak" not in text
    assert {j.external_id: j.extra["slurm_user"] for j in slurm.sync()}[remote.external_id] == ALICE


def test_the_service_account_submits_through_ssh_and_sudo_and_the_command_stays_one_argument(
    slurm, shared_dir
):
    """The production path: the worker is `allot`, reaches the login node over ssh and submits
    as the owner through the sudoers rule. The `;`, quotes and spaces are the job's own."""
    if not KEY.exists() or not tcp_open("127.0.0.1", PORT):
        service_missing(f"no test sshd on 127.0.0.1:{PORT} (run scripts/slurm-up.sh)")
    slurm.runner.prefix = tuple(__import__("shlex").split(ssh_prefix(SERVICE)))
    slurm.service_user = SERVICE
    out = shared_dir / "report"
    login_marker = shared_dir / "ran-at-dispatch"
    command = (
        f"""echo "it's one argument; really" > {out}.1; echo 'second part' >> {out}.1; """
        + report_command(out)
    )
    remote = slurm.submit(launch(command=command, posix_user=ALICE))
    text = job_output(out)
    assert text.splitlines()[0] == ALICE
    assert (Path(f"{out}.1")).read_text() == "it's one argument; really\nsecond part\n"
    assert not login_marker.exists()
    for leak in LEAKS:
        assert leak not in text
    # Stopping goes the same way: scancel as the owner, through sudo.
    slurm.cancel(remote.job_id, remote.external_id)


def test_the_sudoers_rule_lets_the_service_account_run_only_job_commands_as_researchers():
    users_exist()

    def as_service(*args):
        return subprocess.run(
            ["runuser", "-u", SERVICE, "--", "sudo", "-n", *args],
            capture_output=True,
            text=True,
            timeout=20,
        )

    assert as_service("-u", ALICE, "--", "sbatch", "--version").returncode == 0
    assert as_service("-u", ALICE, "--", "id").returncode != 0  # not a job command
    assert as_service("-u", "root", "--", "sbatch", "--version").returncode != 0  # not a researcher
    assert as_service("-u", ALICE, "--", "scontrol", "ping").returncode != 0  # not a job form


def forge(comment: str, user: str, state_dir: Path) -> str:
    """Another Unix user plants a job carrying ``comment``, as anyone with a login could."""
    result = subprocess.run(
        [
            "runuser",
            "-u",
            user,
            "--",
            "sbatch",
            "--parsable",
            f"--comment={comment}",
            f"--output={state_dir}/forged-%j.out",
            "--chdir=/tmp",
            "--wrap=sleep 120",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": os.environ["PATH"]},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().split(";")[0]


def test_a_forged_tag_from_another_user_is_ignored_and_logged(slurm, shared_dir, caplog):
    forged = []
    try:
        spec = launch(command="sleep 120", posix_user=ALICE)
        mine = slurm.submit(spec)
        real = next(j for j in slurm.sync() if j.external_id == mine.external_id)
        # Bob copies Alice's tag, signature and all (squeue shows everyone's comments), and
        # makes up one for a job whose key he guesses.
        forged.append(forge(real.extra["comment"], BOB, shared_dir))
        guessed = real.extra["comment"].replace(spec.attempt_key, f"{spec.job_id}-2")
        forged.append(forge(guessed, BOB, shared_dir))
        with caplog.at_level(logging.WARNING, logger="scheduling.backends.slurm"):
            seen = slurm.sync()
        assert {j.external_id for j in seen}.isdisjoint(forged)
        assert [j.external_id for j in seen if j.attempt_key == spec.attempt_key] == [
            mine.external_id
        ]
        assert all(f"Slurm job {fid} of user '{BOB}'" in caplog.text for fid in forged)
        # A retried submit still finds Alice's job, never adopts Bob's.
        assert slurm.submit(spec).external_id == mine.external_id
        # Allot does not cancel what it did not make, even as an orphan of "its" job id.
        slurm.cancel(spec.job_id, "")
        states = dict(
            line.split()
            for line in subprocess.run(
                ["squeue", "-h", "-o", "%i %T", "-j", ",".join(forged)],
                capture_output=True,
                text=True,
            ).stdout.splitlines()
        )
        assert all(states.get(fid) in {"PENDING", "RUNNING"} for fid in forged)
        assert wait_for(
            lambda: all(
                j.state not in (RemoteState.PENDING, RemoteState.RUNNING)
                for j in slurm.sync()
                if j.external_id == mine.external_id
            )
        )
    finally:
        if forged:
            subprocess.run(["scancel", *forged], capture_output=True, timeout=30)


DECLARED = {
    "WANDB_PROJECT": "olmo",
    "HF_HOME": "/scratch/alice/hf",
    "TRICKY": 'a,b=c; it\'s "here" $(id) `id`\nsecond line',
}


def test_a_job_sees_what_it_declares_and_still_nothing_of_allots_environment(slurm, shared_dir):
    """The job's own variables reach it exactly (commas, quotes, a newline, no expansion),
    through sudo as its owner, next to Slurm's; the worker's never do."""
    out = shared_dir / "report"
    values = shared_dir / "values"
    probe = "; ".join(f'printf "%s\\0" "${name}" >> {values}' for name in DECLARED)
    spec = launch(command=f"{probe}; {report_command(out)}", posix_user=ALICE, env=DECLARED)
    slurm.submit(spec)
    text = job_output(out)
    assert text.splitlines()[0] == ALICE
    assert values.read_text().split("\0")[:-1] == list(DECLARED.values())
    assert "SLURM_JOB_ID=" in text  # Slurm's own variables are still there
    for leak in LEAKS:
        assert f"{leak}=" not in text and f"\n{leak}" not in text, f"{leak} reached the job"
    assert "hunter2" not in text and "do-not-leak" not in text and "secret-broker" not in text


def test_a_command_cannot_turn_its_job_into_an_array_with_a_directive(slurm, shared_dir):
    """sbatch reads #SBATCH lines from a script's top: a command that starts with one must not
    make one Allot job into many Slurm jobs holding GPUs Allot never placed."""
    out = shared_dir / "report"
    command = f"#SBATCH --array=1-4\n{report_command(out)}; sleep 60"
    remote = slurm.submit(launch(command=command, posix_user=ALICE))
    job_output(out)  # it runs (and sleeps, so squeue still shows it)
    lines = subprocess.run(
        ["squeue", "-h", "-r", "-o", "%i %F %K", "-u", ALICE],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.splitlines()
    mine = [line for line in lines if line.split()[1] == remote.external_id]
    assert mine == [f"{remote.external_id} {remote.external_id} N/A"], lines
    slurm.cancel(remote.job_id, remote.external_id)
