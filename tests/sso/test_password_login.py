"""ALLOT_PASSWORD_LOGIN=0 closes every password door: the login page's form, the admin's
login and the API token endpoint; single sign-on stays open."""

import pytest
from django.contrib.auth import authenticate

pytestmark = pytest.mark.django_db


@pytest.fixture
def passwords_off(settings, use_sso):
    use_sso("http://127.0.0.1:9")  # never contacted by these tests
    settings.ALLOT_PASSWORD_LOGIN = False


def test_the_login_page_offers_only_single_sign_on(client, passwords_off):
    page = client.get("/login/?next=/budgets/").content.decode()
    assert "Sign in with Test IdP" in page
    assert "/oidc/login/?next=/budgets/" in page
    assert 'name="password"' not in page


def test_a_password_post_to_the_login_page_is_refused(client, researcher, passwords_off):
    response = client.post("/login/", {"username": "researcher", "password": "demo"})
    assert response.status_code == 403
    assert "_auth_user_id" not in client.session


def test_the_admin_login_sends_people_to_the_login_page(client, cluster_admin, passwords_off):
    response = client.post("/admin/login/", {"username": "cluster_admin", "password": "demo"})
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")
    assert "_auth_user_id" not in client.session


def test_the_token_endpoint_refuses_passwords(client, researcher, passwords_off):
    response = client.post(
        "/api/v1/auth/token/", {"username": "researcher", "password": "demo"}, "application/json"
    )
    assert response.status_code == 403
    assert "/account/tokens/" in response.json()["message"]


def test_no_door_checks_a_password_any_more(rf, researcher, passwords_off):
    assert authenticate(rf.post("/"), username="researcher", password="demo") is None


def test_with_password_login_on_both_are_offered_and_passwords_work(client, researcher, use_sso):
    use_sso("http://127.0.0.1:9")
    page = client.get("/login/").content.decode()
    assert "Sign in with Test IdP" in page and 'name="password"' in page
    response = client.post("/login/", {"username": "researcher", "password": "demo"})
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(researcher.pk)


def test_without_single_sign_on_the_login_page_has_no_sign_in_link(client, db):
    page = client.get("/login/").content.decode()
    assert "Sign in with" not in page and 'name="password"' in page
    assert client.get("/oidc/login/").status_code == 404
