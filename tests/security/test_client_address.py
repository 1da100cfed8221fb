"""Throttles and lockouts key on the real client address: the socket's peer, or with
ALLOT_BEHIND_PROXY=1 the address the one proxy appended to X-Forwarded-For. With DRF's
NUM_PROXIES unset, a client rotating its own X-Forwarded-For got a fresh token budget on
every request."""

import pytest
from django.core.cache import cache
from rest_framework.settings import api_settings

from portal.tokens import client_address

URL = "/api/v1/auth/token/"


@pytest.fixture(autouse=True)
def two_a_minute(settings):
    settings.AXES_ENABLED = False  # the throttle alone, not the failed-login lockout
    rest = dict(settings.REST_FRAMEWORK)
    rest["DEFAULT_THROTTLE_RATES"] = {"token": "2/min"}
    settings.REST_FRAMEWORK = rest
    cache.clear()
    yield
    cache.clear()


def attempt(client, forwarded: str, remote="203.0.113.7"):
    return client.post(
        URL,
        {"username": "nobody", "password": "x"},
        content_type="application/json",
        headers={"x-forwarded-for": forwarded},
        REMOTE_ADDR=remote,
    )


def test_a_client_written_forwarded_for_does_not_buy_more_token_attempts(client, db):
    codes = [attempt(client, f"198.51.100.{n}").status_code for n in range(4)]
    assert codes[-1] == 429, codes


def test_behind_a_proxy_the_address_it_appended_is_the_client(client, db, settings):
    settings.ALLOT_BEHIND_PROXY = True
    # The client writes the first entries; the proxy appends the peer it saw, last.
    forged = [f"198.51.100.{n}, 192.0.2.1" for n in range(4)]
    codes = [attempt(client, header, "10.0.0.2").status_code for header in forged]
    assert codes[-1] == 429, codes
    cache.clear()
    codes = [attempt(client, f"192.0.2.{n}", "10.0.0.2").status_code for n in range(4)]
    assert 429 not in codes, codes


def test_without_a_proxy_drf_trusts_no_forwarded_header(settings):
    assert api_settings.NUM_PROXIES == 0


def test_axes_keys_on_the_same_address(rf, settings):
    request = rf.get("/", headers={"x-forwarded-for": "198.51.100.9"}, REMOTE_ADDR="203.0.113.7")
    assert client_address(request) == "203.0.113.7"
    settings.ALLOT_BEHIND_PROXY = True
    assert client_address(request) == "198.51.100.9"
