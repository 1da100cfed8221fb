"""API tokens: the contract endpoint still answers {"token": ...}; tokens are stored hashed,
expire, are listed and revoked on /account/tokens/, and die with a password change."""

import datetime as dt

import pytest
import time_machine
from django.utils import timezone
from knox.models import AuthToken


def _token(client, username="researcher", password="demo"):
    response = client.post("/api/v1/auth/token/", {"username": username, "password": password})
    assert response.status_code == 200, response.content
    return response.json()["token"]


def _jobs(client, token):
    return client.get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {token}")


def test_the_token_endpoint_keeps_its_contract_and_the_token_works(client, researcher):
    token = _token(client)
    assert _jobs(client, token).status_code == 200


def test_tokens_are_stored_as_digests_only(client, researcher):
    token = _token(client)
    [row] = AuthToken.objects.filter(user=researcher)
    assert token not in row.digest
    assert len(row.digest) == 128  # SHA-512


def test_tokens_expire(client, researcher, settings):
    token = _token(client)
    row = AuthToken.objects.get(user=researcher)
    assert row.expiry is not None
    later = timezone.now() + dt.timedelta(days=31)
    with time_machine.travel(later, tick=False):
        assert _jobs(client, token).status_code == 401


def test_an_expired_token_is_refused_and_deleted_and_beat_sweeps_the_others(client, researcher):
    from portal.tasks import sweep_expired_tokens

    used, unused = _token(client), _token(client)
    fresh_later = timezone.now() + dt.timedelta(days=31)
    with time_machine.travel(fresh_later, tick=False):
        kept = _token(client)
        assert _jobs(client, used).status_code == 401  # expired: refused, and deleted
        assert AuthToken.objects.filter(user=researcher).count() == 2  # not the others
        assert sweep_expired_tokens() == 1  # the unused expired one, by the hourly task
        assert _jobs(client, kept).status_code == 200
        assert _jobs(client, unused).status_code == 401
    assert AuthToken.objects.filter(user=researcher).count() == 1


def test_a_password_change_revokes_every_token(client, researcher):
    first, second = _token(client), _token(client)
    researcher.set_password("a much longer passphrase 2026")
    researcher.save()
    assert _jobs(client, first).status_code == 401
    assert _jobs(client, second).status_code == 401
    assert not AuthToken.objects.filter(user=researcher).exists()


def test_the_old_plain_text_tokens_are_gone(client, researcher):
    from django.apps import apps

    assert not apps.is_installed("rest_framework.authtoken")


def test_the_tokens_page_lists_only_my_tokens(client, researcher, leader):
    _token(client)
    _token(client, "leader")
    mine = AuthToken.objects.get(user=researcher)
    client.force_login(researcher)
    page = client.get("/account/tokens/")
    assert page.status_code == 200
    assert mine.token_key[:8].encode() in page.content
    theirs = AuthToken.objects.get(user=leader)
    assert theirs.token_key[:8].encode() not in page.content


def test_revoking_a_token_on_the_page_ends_it(client, researcher):
    token = _token(client)
    row = AuthToken.objects.get(user=researcher)
    client.force_login(researcher)
    response = client.post(f"/account/tokens/{row.token_key}/revoke/")
    assert response.status_code == 302
    client.logout()
    assert _jobs(client, token).status_code == 401


def test_nobody_revokes_someone_elses_token(client, researcher, leader):
    leaders = _token(client, "leader")
    row = AuthToken.objects.get(user=leader)
    client.force_login(researcher)
    assert client.post(f"/account/tokens/{row.token_key}/revoke/").status_code == 404
    client.logout()
    assert _jobs(client, leaders).status_code == 200


def test_a_new_token_from_the_page_is_shown_once(client, researcher):
    client.force_login(researcher)
    response = client.post("/account/tokens/new/")
    assert response.status_code == 200
    token = response.context["new_token"]
    client.logout()
    assert _jobs(client, token).status_code == 200


def test_the_tokens_page_needs_a_login(client, db):
    assert client.get("/account/tokens/").status_code == 302


@pytest.mark.parametrize("password", ["demo", "password123", "12345678901", "researcher1"])
def test_weak_passwords_are_refused(researcher, password):
    from django.contrib.auth.password_validation import validate_password
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError):
        validate_password(password, researcher)


def test_a_strong_password_passes(researcher):
    from django.contrib.auth.password_validation import validate_password

    validate_password("correct horse battery staple", researcher)


def test_a_token_authenticates_as_its_user_loaded_as_the_orm_loads_it(client, researcher):
    """The lookup reads the token and its user with one hand-written join: the
    user it hands the view must be the ORM's user, every field converted alike."""
    from portal.tokens import TokenAuthentication

    secret = _token(client)
    user, auth_token = TokenAuthentication().authenticate_credentials(secret.encode())
    expected = type(researcher).objects.get(pk=researcher.pk)
    for field in type(researcher)._meta.concrete_fields:
        assert getattr(user, field.attname) == getattr(expected, field.attname), field.name
    assert auth_token == AuthToken.objects.get(user=researcher)
    assert auth_token.expiry == AuthToken.objects.get(user=researcher).expiry
    assert timezone.is_aware(auth_token.expiry) and timezone.is_aware(user.date_joined)
    assert not user._state.adding and user._state.db == "default"


def test_a_token_with_the_right_key_and_a_wrong_secret_is_refused(client, researcher):
    secret = _token(client)
    forged = secret[:15] + ("0" if secret[15] != "0" else "1") + secret[16:]
    assert _jobs(client, forged).status_code == 401
    assert _jobs(client, secret).status_code == 200


def test_a_deactivated_users_token_is_refused_at_its_next_use(client, researcher):
    secret = _token(client)
    assert _jobs(client, secret).status_code == 200
    type(researcher).objects.filter(pk=researcher.pk).update(is_active=False)
    response = _jobs(client, secret)
    assert response.status_code == 401
    assert "inactive" in response.json()["message"]


MALFORMED = ["Token ", "Token a b", f"Token {'g' * 64}", f"Token {'a' * 63}"]


@pytest.mark.parametrize("header", MALFORMED)
def test_a_malformed_token_header_is_a_401(client, researcher, header):
    assert client.get("/api/v1/jobs/", HTTP_AUTHORIZATION=header).status_code == 401
