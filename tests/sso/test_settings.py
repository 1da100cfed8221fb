"""Single sign-on settings: read from the environment, refused loudly when incomplete, and
Allot starts without asking the provider anything."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def manage_check(tmp_path, **env):
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(("ALLOT_OIDC", "ALLOT_PASS"))
    }
    environment |= {"DEBUG": "1", "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3", **env}
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_allot_starts_without_asking_the_provider(tmp_path, hanging_issuer):
    issuer, accepted = hanging_issuer
    secret = tmp_path / "secret"
    secret.write_text("from-a-file\n")
    done = manage_check(
        tmp_path,
        ALLOT_OIDC_ISSUER=issuer,
        ALLOT_OIDC_CLIENT_ID="allot",
        ALLOT_OIDC_CLIENT_SECRET_FILE=str(secret),
        ALLOT_PASSWORD_LOGIN="0",
    )
    assert done.returncode == 0, done.stderr
    assert accepted == []


def test_an_issuer_without_a_client_stops_allot(tmp_path):
    done = manage_check(tmp_path, ALLOT_OIDC_ISSUER="https://sso.example.org")
    assert done.returncode != 0 and "ALLOT_OIDC_CLIENT_ID" in done.stderr


def test_password_login_off_without_single_sign_on_stops_allot(tmp_path):
    done = manage_check(tmp_path, ALLOT_PASSWORD_LOGIN="0")
    assert done.returncode != 0 and "ALLOT_PASSWORD_LOGIN=0 needs" in done.stderr


def test_a_malformed_role_map_stops_allot(tmp_path):
    done = manage_check(tmp_path, ALLOT_OIDC_ROLE_MAP="nlp-pm=boss:nlp")
    assert done.returncode != 0 and "ALLOT_OIDC_ROLE_MAP" in done.stderr
