"""The command wrapper every Slurm call goes through: timeouts and errors sorted into
BackendUnavailable (retry later) and BackendError (refused). Real processes, no Slurm needed."""

import sys
import time
from pathlib import Path

import pytest

from scheduling.backends.base import BackendError, BackendUnavailable
from scheduling.backends.command import CommandRunner, error_message
from scheduling.backends.slurm import UNAVAILABLE_PATTERNS, SlurmBackend

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"
HANG = [sys.executable, "-c", "import time; time.sleep(30)"]


def slurm_like(stderr: str, code: int) -> list[str]:
    """A command that prints what a Slurm client printed and exits like it."""
    return [sys.executable, "-c", f"import sys; sys.stderr.write({stderr!r}); sys.exit({code})"]


def test_a_command_that_never_answers_is_unavailable_within_the_timeout():
    runner = CommandRunner(timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="did not answer within 0.5 s"):
        runner.run(HANG)
    assert time.monotonic() - started < 5


def test_a_timeout_kills_the_whole_process_group(tmp_path):
    marker = tmp_path / "still-alive"
    script = f"sleep 1 && touch {marker}"
    with pytest.raises(BackendUnavailable):
        CommandRunner(timeout_s=0.3).run(["sh", "-c", f"({script}) & wait"])
    time.sleep(1.5)
    assert not marker.exists()


def test_a_missing_binary_is_unavailable_not_a_crash():
    with pytest.raises(BackendUnavailable, match="command not found"):
        CommandRunner().run(["no-such-slurm-command"])


def test_a_refusal_is_a_backend_error_carrying_slurms_own_words():
    stderr = (FIXTURES / "sbatch_bad_node.txt").read_text()
    runner = CommandRunner(unavailable_patterns=UNAVAILABLE_PATTERNS, label="slurm[x]")
    with pytest.raises(BackendError, match="Invalid node name specified") as caught:
        runner.run(slurm_like(stderr, 1))
    assert not isinstance(caught.value, BackendUnavailable)


def test_an_unreachable_controller_is_unavailable_even_though_the_client_exited():
    stderr = (FIXTURES / "sbatch_controller_down.txt").read_text()
    runner = CommandRunner(unavailable_patterns=UNAVAILABLE_PATTERNS)
    with pytest.raises(BackendUnavailable, match="Unable to contact slurm controller"):
        runner.run(slurm_like(stderr, 1))


def test_without_check_a_non_zero_exit_is_returned_to_the_caller():
    result = CommandRunner().run(slurm_like("gone\n", 1), check=False)
    assert (result.returncode, result.stderr) == (1, "gone\n")


def test_the_error_line_is_the_last_one_that_names_an_error():
    assert error_message("info: a\nsbatch: error: bad\nhint: b\n") == "sbatch: error: bad"
    assert error_message("", "only stdout\n") == "only stdout"
    assert error_message("") == "no output"


def test_a_prefix_runs_the_commands_through_another_program():
    runner = CommandRunner(prefix="env ALLOT_PREFIX_TEST=1 sh -c")
    result = runner.run(["sh", "-c", "echo $ALLOT_PREFIX_TEST"])
    assert result.stdout.strip() == "1"


TRICKY = """python train.py --name 'a b' "c'd"; echo pwned > /tmp/x | sh $HOME `id`"""


def test_with_a_prefix_every_argument_reaches_the_other_side_as_one_argument():
    # A prefix is a remote shell (ssh host, sh -c): it re-parses one command line, so each
    # argument is quoted for it. Unquoted, the `;` would run `echo pwned` at dispatch.
    runner = CommandRunner(prefix="sh -c")
    result = runner.run(["printf", "%s\\n", TRICKY, "second"])
    assert result.stdout.splitlines() == [TRICKY, "second"]


def test_a_command_runs_with_a_minimal_environment_never_the_workers(monkeypatch):
    for name in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE", "ALLOT_SECRET_KEY"):
        monkeypatch.setenv(name, "leaked")
    runner = CommandRunner(env={"SLURM_CONF": "/etc/slurm/other.conf"})
    seen = dict(
        line.split("=", 1) for line in runner.run(["env"]).stdout.splitlines() if "=" in line
    )
    assert "leaked" not in seen.values()
    assert seen["SLURM_CONF"] == "/etc/slurm/other.conf"
    assert set(seen) <= {"PATH", "LANG", "LC_ALL", "HOME", "USER", "LOGNAME", "SLURM_CONF"}


def test_a_command_too_long_for_the_kernel_is_refused_not_unavailable():
    # One argument over MAX_ARG_STRLEN (128 KiB): E2BIG is about this request, not the cluster.
    with pytest.raises(BackendError, match="too long") as caught:
        CommandRunner().run(["true", "x" * 200_000])
    assert not isinstance(caught.value, BackendUnavailable)


def test_a_slurm_backend_pointed_at_a_hanging_command_is_unavailable_for_every_call():
    # The ssh the backend would run, stood in for by a command that hangs (options build only
    # ssh: scheduling/backends/ssh.py).
    backend = SlurmBackend("x", {"command_timeout": "0.3"})
    backend.runner.prefix = tuple(HANG)
    for call in (backend.sync, backend.discover_nodes, lambda: backend.cancel(1, "")):
        with pytest.raises(BackendUnavailable):
            call()


def test_an_unknown_preempt_mode_is_refused_when_the_backend_is_built():
    with pytest.raises(BackendError, match="preempt_mode"):
        SlurmBackend("x", {"preempt_mode": "suspend"})
