"""The issuer's discovery document: read on first use with a timeout, so Allot serves pages
while the identity provider hangs or is down, and checked to name the issuer asked for."""

import socket

import pytest

from portal.sso import discovery
from tests.sso.conftest import document_for

pytestmark = pytest.mark.django_db


def test_a_hanging_provider_costs_the_timeout_and_a_503_not_a_hung_worker(
    client, use_sso, hanging_issuer
):
    issuer, accepted = hanging_issuer
    use_sso(issuer, ALLOT_OIDC_TIMEOUT_S=1)
    response = client.get("/oidc/login/")
    assert response.status_code == 503
    assert "cannot be reached" in response.content.decode()
    assert len(accepted) == 1  # it did ask, and gave up


def test_the_login_page_never_asks_the_provider(client, use_sso, hanging_issuer):
    issuer, accepted = hanging_issuer
    use_sso(issuer, ALLOT_OIDC_TIMEOUT_S=1)
    page = client.get("/login/")
    assert page.status_code == 200 and "Sign in with Test IdP" in page.content.decode()
    assert accepted == []


def test_a_provider_that_is_down_gives_a_503(client, use_sso):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    use_sso(closed)
    assert client.get("/oidc/login/").status_code == 503


def test_sign_in_redirects_to_the_discovered_endpoint_with_pkce(client, use_sso, issuer_serving):
    issuer = issuer_serving(document_for)
    use_sso(issuer)
    response = client.get("/oidc/login/?next=/budgets/")
    assert response.status_code == 302
    location = response["Location"]
    assert location.startswith(f"{issuer}/auth?")
    assert "code_challenge_method=S256" in location and "nonce=" in location
    assert "client_id=allot" in location


def test_a_document_naming_another_issuer_is_refused(settings, use_sso, issuer_serving):
    issuer = issuer_serving(lambda issuer: document_for("https://evil.example"))
    use_sso(issuer)
    with pytest.raises(discovery.DiscoveryError, match="another issuer"):
        discovery.document()


def test_the_document_is_read_once_and_kept(use_sso, issuer_serving):
    reads = []
    issuer = issuer_serving(lambda issuer: reads.append(1) or document_for(issuer))
    use_sso(issuer)
    discovery.document()
    discovery.document()
    assert len(reads) == 1
