"""The ID token: signed by the issuer's key, for this client, from this issuer, not expired.
mozilla-django-oidc checks only the signature; the backend adds the rest."""

import time

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from django.core.exceptions import SuspiciousOperation

from portal.sso.backends import OIDCBackend
from tests.sso.conftest import CLIENT_ID, document_for

pytestmark = pytest.mark.django_db
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def issuer(use_sso, issuer_serving):
    issuer = issuer_serving(document_for)
    use_sso(issuer)
    return issuer


def token(**claims):
    now = int(time.time())
    return jwt.encode({"sub": "alice", "iat": now, "exp": now + 300, **claims}, KEY, "RS256")


def test_a_token_for_this_client_from_the_issuer_passes(issuer):
    payload = OIDCBackend().get_payload_data(token(iss=issuer, aud=CLIENT_ID), KEY.public_key())
    assert payload["sub"] == "alice"


@pytest.mark.parametrize(
    "claims",
    [
        {"aud": "another-client"},
        {"iss": "https://elsewhere.example"},
        {"exp": int(time.time()) - 3600},
    ],
    ids=["another audience", "another issuer", "expired"],
)
def test_a_token_not_meant_for_us_is_refused(issuer, claims):
    bad = token(**{"iss": issuer, "aud": CLIENT_ID, **claims})
    with pytest.raises(SuspiciousOperation, match="ID token refused"):
        OIDCBackend().get_payload_data(bad, KEY.public_key())


def test_a_password_login_never_reaches_the_provider(rf, issuer):
    # No nonce: not the callback, so no discovery, no token request.
    assert OIDCBackend().authenticate(rf.get("/?code=x&state=y"), username="a") is None


def test_a_deactivated_user_loses_a_single_sign_on_session(client, researcher, issuer):
    client.force_login(researcher, backend="portal.sso.backends.OIDCBackend")
    assert client.get("/").status_code == 200
    researcher.is_active = False
    researcher.save(update_fields=["is_active"])
    assert client.get("/").status_code == 302
