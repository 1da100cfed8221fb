"""With DEBUG off and no SECRET_KEY, what serves or signs refuses to start (the web through its
WSGI module, runserver, a worker, beat; ``check --deploy`` says so), and a command that serves
nothing runs as printed in a plain shell (portal/secret.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MISSING = "SECRET_KEY must be set"


def _run(args: list[str], **environ) -> subprocess.CompletedProcess:
    """``args`` in a production shell: DEBUG off, no key, the project's own settings."""
    drop = {"DEBUG", "SECRET_KEY", "SECRET_KEY_FILE", "DJANGO_SETTINGS_MODULE"}
    drop |= {"DJANGO_ALLOW_ASYNC_UNSAFE"}
    env = {k: v for k, v in os.environ.items() if k not in drop} | environ
    return subprocess.run(
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_simulate_runs_without_a_secret_key(tmp_path):
    out = tmp_path / "out.json"
    done = _run(
        [sys.executable, "manage.py", "simulate", "examples/small.yaml", "examples/small.csv"]
        + ["--policy", "fairshare", "--json", str(out), "--until", "3600"]
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["policy"] == "fairshare"


def test_the_web_server_refuses_to_serve_without_a_secret_key():
    done = _run([sys.executable, "-m", "gunicorn", "--bind", "127.0.0.1:0", "portal.wsgi"])
    assert done.returncode != 0
    assert MISSING in done.stderr


def test_runserver_refuses_to_serve_without_a_secret_key():
    done = _run([sys.executable, "manage.py", "runserver", "--noreload", "127.0.0.1:0"])
    assert done.returncode != 0
    assert MISSING in done.stderr


@pytest.mark.parametrize("program", [["worker", "--pool", "solo"], ["beat"]])
def test_workers_and_beat_refuse_to_start_without_a_secret_key(program, tmp_path):
    args = [sys.executable, "-m", "celery", "-A", "portal", *program]
    if program[0] == "beat":
        args += ["--schedule", str(tmp_path / "beat-schedule")]
    done = _run(args)
    assert done.returncode != 0
    assert MISSING in done.stderr


def test_check_deploy_fails_naming_the_secret_key():
    done = _run([sys.executable, "manage.py", "check", "--deploy"])
    assert done.returncode != 0
    assert "allot.E001" in done.stderr and MISSING in done.stderr


def test_the_public_development_key_is_refused_with_debug_off():
    from portal.settings import _DEV_KEY

    done = _run([sys.executable, "manage.py", "check"], SECRET_KEY=_DEV_KEY)
    assert done.returncode != 0
    assert MISSING in done.stderr


def test_a_key_lets_the_web_start():
    code = "import portal.wsgi; print('loaded')"
    done = _run([sys.executable, "-c", code], SECRET_KEY="k" * 60, ALLOWED_HOSTS="a.example")
    assert done.returncode == 0, done.stderr
    assert "loaded" in done.stdout
