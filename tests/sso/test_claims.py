"""What a sign-in takes from the claims besides roles: the POSIX account jobs run as, and a
provider's refusal shown on the login page."""

import pytest

from portal.sso.claims import sync_posix_account, sync_profile
from scheduling.models import PosixAccount
from tests.budgets.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def posix_claims(settings):
    settings.ALLOT_OIDC_POSIX_CLAIM = "posix_username"
    settings.ALLOT_OIDC_UID_CLAIM = "uid_number"
    settings.ALLOT_OIDC_GID_CLAIM = "gid_number"


def test_the_posix_claims_set_the_account(posix_claims):
    alice = UserFactory(username="alice")
    sync_posix_account(alice, {"posix_username": "aokafor", "uid_number": "41001", "gid_number": 7})
    account = PosixAccount.objects.get(user=alice)
    assert (account.name, account.uid, account.gid) == ("aokafor", 41001, 7)


def test_an_absent_claim_keeps_the_account_set_by_hand(posix_claims):
    alice = UserFactory(username="alice")
    PosixAccount.objects.create(user=alice, name="alice1", uid=5000, gid=5000)
    sync_posix_account(alice, {"email": "alice@example.org"})
    assert PosixAccount.objects.get(user=alice).name == "alice1"


@pytest.mark.parametrize("name", ["root", "Not A Name", "bob1"])
def test_a_claim_that_cannot_be_the_account_is_logged_and_changes_nothing(
    posix_claims, caplog, name
):
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    PosixAccount.objects.create(user=alice, name="alice1")
    PosixAccount.objects.create(user=bob, name="bob1")
    sync_posix_account(alice, {"posix_username": name})
    assert PosixAccount.objects.get(user=alice).name == "alice1"
    assert any(getattr(r, "event", "") == "sso_posix_refused" for r in caplog.records)


def test_without_a_posix_claim_configured_nothing_is_set(settings):
    alice = UserFactory(username="alice")
    sync_posix_account(alice, {"posix_username": "aokafor"})
    assert not PosixAccount.objects.filter(user=alice).exists()


def test_the_profile_follows_the_claims():
    alice = UserFactory(username="alice", email="old@example.org")
    sync_profile(alice, {"email": "alice@example.org", "given_name": "Alice"})
    alice.refresh_from_db()
    assert (alice.email, alice.first_name) == ("alice@example.org", "Alice")


def test_a_refusal_at_the_provider_returns_to_the_login_page_with_a_message(client, use_sso):
    use_sso("http://127.0.0.1:9")
    response = client.get("/oidc/callback/?error=access_denied&state=x")
    assert response.status_code == 302 and response["Location"] == "/login/?sso=failed"
    assert "Single sign-on did not complete" in client.get(response["Location"]).content.decode()
