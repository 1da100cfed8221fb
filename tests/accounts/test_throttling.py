"""Failed logins are throttled on every door: /login/, /admin/ and the token endpoint."""

import pytest
from django.core.cache import cache


@pytest.fixture(autouse=True)
def throttling_on(settings):
    settings.AXES_ENABLED = True
    settings.AXES_FAILURE_LIMIT = 3
    cache.clear()
    yield
    cache.clear()


def _fail(client, url, username, times):
    for _ in range(times):
        client.post(url, {"username": username, "password": "wrong"})


def test_the_login_page_locks_out_after_repeated_failures(client, researcher):
    _fail(client, "/login/", "researcher", 3)
    response = client.post("/login/", {"username": "researcher", "password": "demo"})
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session


def test_the_admin_login_locks_out_after_repeated_failures(client, db):
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_superuser("root", "root@example.org", "long passphrase 9")
    _fail(client, "/admin/login/", "root", 3)
    response = client.post("/admin/login/", {"username": "root", "password": "long passphrase 9"})
    assert response.status_code == 429


def test_the_token_endpoint_locks_out_with_a_json_message(client, researcher):
    _fail(client, "/api/v1/auth/token/", "researcher", 3)
    response = client.post("/api/v1/auth/token/", {"username": "researcher", "password": "demo"})
    assert response.status_code == 429
    assert "Too many failed logins" in response.json()["message"]


def test_a_lockout_is_per_username_and_address(client, researcher, leader):
    _fail(client, "/api/v1/auth/token/", "researcher", 3)
    response = client.post("/api/v1/auth/token/", {"username": "leader", "password": "demo"})
    assert response.status_code == 200


def test_a_success_before_the_limit_resets_the_count(client, researcher):
    _fail(client, "/login/", "researcher", 2)
    assert client.post("/login/", {"username": "researcher", "password": "demo"}).status_code == 302
    client.logout()
    _fail(client, "/login/", "researcher", 2)
    assert client.post("/login/", {"username": "researcher", "password": "demo"}).status_code == 302


def test_token_requests_are_rate_limited_even_when_they_succeed(client, researcher, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"token": "3/min"},
    }
    codes = [
        client.post(
            "/api/v1/auth/token/", {"username": "researcher", "password": "demo"}
        ).status_code
        for _ in range(4)
    ]
    assert codes == [200, 200, 200, 429]


def test_behind_a_proxy_the_address_the_proxy_appended_counts(client, researcher, settings):
    settings.ALLOT_BEHIND_PROXY = True
    for forged in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
        client.post(
            "/login/",
            {"username": "researcher", "password": "wrong"},
            HTTP_X_FORWARDED_FOR=f"{forged}, 203.0.113.7",
        )
    response = client.post(
        "/login/",
        {"username": "researcher", "password": "demo"},
        HTTP_X_FORWARDED_FOR="10.0.0.9, 203.0.113.7",
    )
    assert response.status_code == 429
    elsewhere = client.post(
        "/login/",
        {"username": "researcher", "password": "demo"},
        HTTP_X_FORWARDED_FOR="203.0.113.8",
    )
    assert elsewhere.status_code == 302


def test_the_lockout_ends_after_the_cool_off(client, researcher):
    import datetime as dt

    import time_machine
    from django.utils import timezone

    _fail(client, "/login/", "researcher", 3)
    assert client.post("/login/", {"username": "researcher", "password": "demo"}).status_code == 429
    with time_machine.travel(timezone.now() + dt.timedelta(minutes=16), tick=False):
        response = client.post("/login/", {"username": "researcher", "password": "demo"})
    assert response.status_code == 302
