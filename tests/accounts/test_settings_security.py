"""DEBUG off by default, the proxy header only behind a proxy, seed_demo refused in production."""

import os
import re
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command

PRODUCTION = {"SECRET_KEY": "x" * 60 + "-production-secret", "ALLOWED_HOSTS": "allot.example.org"}


def _setting(name: str, **environ) -> str:
    """The value of a setting in a fresh process with exactly this environment on top."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DEBUG", "ALLOT_BEHIND_PROXY", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    }
    env |= {"DJANGO_SETTINGS_MODULE": "portal.settings", **environ}
    code = f"from django.conf import settings; print(repr(settings.{name}))"
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_debug_is_off_unless_asked_for():
    assert _setting("DEBUG", **PRODUCTION) == "False"
    assert _setting("DEBUG", DEBUG="1") == "True"


def test_the_proxy_header_is_trusted_only_behind_a_proxy():
    assert _setting("SECURE_PROXY_SSL_HEADER", **PRODUCTION) == "None"
    behind = _setting("SECURE_PROXY_SSL_HEADER", ALLOT_BEHIND_PROXY="1", **PRODUCTION)
    assert behind == "('HTTP_X_FORWARDED_PROTO', 'https')"


def test_make_demo_turns_debug_on_for_the_demo():
    makefile = open("Makefile").read()
    demo = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert re.search(r"DEBUG\s*=\s*1", demo)


@pytest.mark.django_db
def test_seed_demo_refuses_to_run_with_debug_off(settings):
    from django.contrib.auth import get_user_model

    settings.DEBUG = False
    with pytest.raises(CommandError, match="DEBUG"):
        call_command("seed_demo")
    assert not get_user_model().objects.filter(username="admin").exists()
