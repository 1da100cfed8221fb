import os

import pytest
from django.core.exceptions import ImproperlyConfigured

from core import env


def test_env_bool_rejects_garbage_naming_the_variable(monkeypatch):
    monkeypatch.setenv("ALLOT_X", "maybe")
    with pytest.raises(ImproperlyConfigured, match="ALLOT_X"):
        env.env_bool("ALLOT_X")


def test_env_int_rejects_non_numbers_naming_the_variable(monkeypatch):
    monkeypatch.setenv("ALLOT_N", "ten")
    with pytest.raises(ImproperlyConfigured, match="ALLOT_N"):
        env.env_int("ALLOT_N", 1)


def test_env_str_reads_secret_files(monkeypatch, tmp_path):
    secret = tmp_path / "key"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("ALLOT_KEY_FILE", str(secret))
    assert env.env_str("ALLOT_KEY") == "s3cret"


def test_env_str_without_default_fails_loudly(monkeypatch):
    monkeypatch.delenv("ALLOT_MISSING", raising=False)
    with pytest.raises(ImproperlyConfigured, match="ALLOT_MISSING must be set"):
        env.env_str("ALLOT_MISSING")


def test_env_list_splits_on_commas(monkeypatch):
    monkeypatch.setenv("ALLOT_HOSTS", "a.example, b.example,,")
    assert env.env_list("ALLOT_HOSTS", []) == ["a.example", "b.example"]


def test_ci_runs_on_postgresql_when_services_are_required(settings):
    if os.environ.get("ALLOT_REQUIRE_SERVICES") != "1":
        pytest.skip("only meaningful in CI")
    assert settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"


def test_production_settings_pass_check_deploy(tmp_path):
    import subprocess
    import sys

    # Browser test modules allow async-unsafe ORM calls in their own process; a deployment
    # must not inherit that.
    environ = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    environ |= {
        "DEBUG": "0",
        "SECRET_KEY": "x" * 60 + "-production-secret-!@#$%^&*()",
        "ALLOWED_HOSTS": "allot.example.org",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
