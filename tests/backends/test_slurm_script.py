"""The batch script sbatch gets on standard input: the job's declared variables, quoted, then its
command. Checked by running the script with a real ``sh`` in an empty environment, as Slurm's
``--export=NONE`` leaves it (the harness test in test_slurm_identity.py runs it in Slurm)."""

import subprocess

import pytest

from scheduling.backends.base import BackendError, LaunchSpec
from scheduling.backends.slurm import batch_script

TRICKY = {
    "COMMAS": "a,b,c=d",  # what --export=NONE,NAME=value would split
    "QUOTES": 'it\'s "quoted" and \\backslashed\\',
    "SUBST": "$(touch /tmp/allot-never) `id` $HOME ${PATH}",
    "LINES": "first\nsecond; echo injected",
    "EMPTY": "",
    "UNICODE": "Zürich ✓",
}


def spec(command="true", env=None) -> LaunchSpec:
    return LaunchSpec(7, "k", "t", "u", "", 1, ("node1",), 1, command, env=env or {})


def run(script: str) -> str:
    result = subprocess.run(
        ["sh", "-s"], input=script, capture_output=True, text=True, env={}, timeout=10
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_each_declared_value_reaches_the_command_exactly_as_given():
    probe = "; ".join(f'printf "%s\\0" "${name}"' for name in TRICKY)
    out = run(batch_script(spec(probe, TRICKY)))
    assert out.split("\0")[:-1] == list(TRICKY.values())


def test_a_value_is_never_run_as_code():
    out = run(batch_script(spec("env", TRICKY)))
    assert "injected" not in out.replace("echo injected", "")
    assert "uid=" not in out  # `id` stayed text


def test_without_declared_variables_the_script_is_just_the_command():
    script = batch_script(spec("echo hello"))
    assert "export" not in script
    assert run(script) == "hello\n"


def test_a_command_cannot_add_sbatch_directives():
    """sbatch reads ``#SBATCH`` lines from a script's top; the script's own ``:`` line comes
    first, so a command starting with one is only a comment (checked on the harness too)."""
    script = batch_script(spec("#SBATCH --array=1-1000\ntrue"))
    lines = script.splitlines()
    first_command = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    assert lines[first_command] == ":"
    assert lines.index("#SBATCH --array=1-1000") > first_command


@pytest.mark.parametrize("name", ["A;rm -rf /", "1X", "A B", "A=B"])
def test_a_name_that_is_not_a_shell_name_is_refused_at_the_edge_too(name):
    with pytest.raises(BackendError, match="cannot be exported"):
        batch_script(spec(env={name: "x"}))
