"""Single sign-on users are keyed by (issuer, subject), stored in SsoIdentity. Matching by the
username claim let a provider account with ``preferred_username="admin"`` (any subject) sign
in as the local superuser named admin. An existing local account is linked only explicitly
(``manage.py sso_link`` or the admin), or with ALLOT_OIDC_LINK_EXISTING=1 by the username
claim for an ordinary account — never a staff or superuser one."""

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from portal.models import SsoIdentity
from portal.sso.backends import OIDCBackend

pytestmark = pytest.mark.django_db
ISSUER = "https://idp.example.org"
User = get_user_model()


@pytest.fixture
def sso_on(use_sso_settings):
    return use_sso_settings


@pytest.fixture
def use_sso_settings(settings):
    settings.ALLOT_OIDC_ISSUER = ISSUER
    settings.ALLOT_OIDC_CLIENT_ID = "allot"
    settings.ALLOT_OIDC_CLIENT_SECRET = "s"
    settings.ALLOT_OIDC_ROLE_MAP = {}
    settings.ALLOT_OIDC_POSIX_CLAIM = ""
    settings.ALLOT_OIDC_LINK_EXISTING = False
    return settings


def callback(rf, monkeypatch, sub, username, iss=ISSUER, **claims):
    """The callback after the provider's token was checked (signature, audience, issuer, nonce:
    tests/sso/test_id_token.py): the backend decides who this is."""
    payload = {"iss": iss, "sub": sub, "aud": "allot", "preferred_username": username, **claims}
    backend = OIDCBackend()
    monkeypatch.setattr(backend, "get_token", lambda data: {"id_token": "i", "access_token": "a"})
    monkeypatch.setattr(backend, "verify_token", lambda token, **kw: dict(payload))
    monkeypatch.setattr(type(backend), "OIDC_OP_USER_ENDPOINT", None)
    request = rf.get("/oidc/callback/?code=c&state=s")
    request.session = {}
    return backend.authenticate(request, nonce="n")


def test_a_username_claim_never_signs_in_as_an_existing_superuser(rf, monkeypatch, sso_on):
    admin = User.objects.create_superuser("admin", "admin@example.org", "long passphrase 9")
    assert callback(rf, monkeypatch, "attacker-sub-999", "admin") is None
    assert User.objects.filter(username="admin").get() == admin
    assert not SsoIdentity.objects.exists()


def test_nor_as_an_ordinary_local_account_without_an_explicit_link(
    rf, monkeypatch, sso_on, researcher
):
    assert callback(rf, monkeypatch, "someone-else", researcher.username) is None
    assert not SsoIdentity.objects.exists()


def test_a_new_subject_gets_a_new_account_keyed_by_issuer_and_subject(rf, monkeypatch, sso_on):
    user = callback(rf, monkeypatch, "sub-1", "alice")
    assert user is not None and user.username == "alice"
    assert SsoIdentity.objects.get().user == user
    # The same subject later, under another username claim: still alice.
    assert callback(rf, monkeypatch, "sub-1", "alice-renamed") == user
    # Another subject claiming alice's username: refused, not alice.
    assert callback(rf, monkeypatch, "sub-2", "alice") is None


def test_the_same_subject_at_another_issuer_is_someone_else(rf, monkeypatch, sso_on):
    alice = callback(rf, monkeypatch, "sub-1", "alice")
    assert callback(rf, monkeypatch, "sub-1", "alice", iss="https://other.example") is None
    assert SsoIdentity.objects.get().user == alice


def test_an_explicit_link_lets_the_subject_in_as_the_local_account(
    rf, monkeypatch, sso_on, researcher
):
    call_command("sso_link", researcher.username, "sub-7", "--issuer", ISSUER)
    assert callback(rf, monkeypatch, "sub-7", "whatever") == researcher


def test_the_link_command_refuses_a_subject_linked_to_someone_else(sso_on, researcher, outsider):
    call_command("sso_link", researcher.username, "sub-7", "--issuer", ISSUER)
    with pytest.raises(CommandError, match="already"):
        call_command("sso_link", outsider.username, "sub-7", "--issuer", ISSUER)


def test_linking_by_username_when_allowed_skips_staff_and_superusers(
    rf, monkeypatch, sso_on, researcher
):
    sso_on.ALLOT_OIDC_LINK_EXISTING = True
    User.objects.create_superuser("admin", "admin@example.org", "long passphrase 9")
    User.objects.create_user("ops", is_staff=True)
    assert callback(rf, monkeypatch, "x-1", "admin") is None
    assert callback(rf, monkeypatch, "x-2", "ops") is None
    assert callback(rf, monkeypatch, "x-3", researcher.username) == researcher
    assert list(SsoIdentity.objects.values_list("subject", flat=True)) == ["x-3"]
    # Linked once: another subject claiming the same username is refused.
    assert callback(rf, monkeypatch, "x-4", researcher.username) is None


def test_an_administrator_links_an_identity_in_the_admin(admin_client, researcher, sso_on):
    response = admin_client.post(
        "/admin/portal/ssoidentity/add/",
        {"user": researcher.pk, "issuer": ISSUER, "subject": "sub-9"},
    )
    assert response.status_code == 302
    assert SsoIdentity.objects.get(subject="sub-9").user == researcher
