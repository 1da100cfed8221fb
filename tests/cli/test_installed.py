"""The command as a user gets it: the console script (exit codes and one-line errors from the
real entry point, shell completion), and ``pip install ./cli`` into a bare venv, which must
work against a live server without pulling in Django."""

import os
import shutil
import socket
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ALLOT = Path(sys.executable).with_name("allot")  # `make install` puts it in the project venv


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def shell_env(tmp_path, **extra):
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "ALLOT_CONFIG": str(tmp_path / "config.toml"),
        **extra,
    }


def run(args, env, stdin=None, timeout=60):
    return subprocess.run(
        [str(a) for a in args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_console_script_fails_in_one_line_with_its_exit_code(tmp_path):
    env = shell_env(tmp_path, ALLOT_URL=f"http://127.0.0.1:{closed_port()}", ALLOT_TOKEN="f" * 64)
    unreachable = run([ALLOT, "queue"], env)
    assert unreachable.returncode == 3
    assert unreachable.stderr.count("\n") == 1 and "Traceback" not in unreachable.stderr
    assert run([ALLOT, "status", "abc"], env).returncode == 2
    assert run([ALLOT, "queue"], shell_env(tmp_path)).returncode == 3  # not logged in
    assert run([ALLOT, "--help"], env).returncode == 0


def test_shell_completion_completes_commands_and_options(tmp_path):
    script = run([ALLOT, "completion", "bash"], shell_env(tmp_path))
    assert script.returncode == 0 and "_ALLOT_COMPLETE=bash_complete" in script.stdout
    env = shell_env(
        tmp_path, _ALLOT_COMPLETE="bash_complete", COMP_WORDS="allot qu", COMP_CWORD="1"
    )
    assert "plain,queue" in run([ALLOT], env).stdout.splitlines()
    env |= {"COMP_WORDS": "allot queue --mi", "COMP_CWORD": "2"}
    assert "plain,--mine" in run([ALLOT], env).stdout.splitlines()


@pytest.mark.django_db(transaction=True)
def test_pip_install_cli_into_a_bare_venv_works_without_django(tmp_path, live_server, researcher):
    source = tmp_path / "cli"
    shutil.copytree(
        ROOT / "cli", source, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "build")
    )
    home = tmp_path / "venv"
    venv.create(home, with_pip=True, system_site_packages=False)
    python = home / "bin" / "python"
    installed = run([python, "-m", "pip", "install", "--quiet", str(source)], None, timeout=600)
    assert installed.returncode == 0, installed.stderr
    assert run([python, "-c", "import django"], None).returncode != 0
    assert "Django" not in run([python, "-m", "pip", "list"], None).stdout

    allot, env = home / "bin" / "allot", shell_env(tmp_path)
    assert run([allot, "--help"], env).returncode == 0
    login = run(
        [allot, "login", "--url", live_server.url, "-u", "researcher", "--password-stdin"],
        env,
        stdin="demo\n",
    )
    assert login.returncode == 0, login.stderr
    assert run([allot, "queue", "--json"], env).stdout.strip() == "[]"
