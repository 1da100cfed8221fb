"""The single sign-on journey in real Chromium against a real OpenID Connect provider: sign in
at the provider, land on Allot's home page with the role the provider's groups map to, and the
POSIX account from the claims."""

import pytest

from budgets.models import AuditEntry, Role
from scheduling.models import PosixAccount

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ALICE = {
    "preferred_username": "alice",
    "email": "alice@example.org",
    "given_name": "Alice",
    "family_name": "Okafor",
    "groups": ["nlp-pm", "staff"],
    "posix_username": "aokafor",
    "uid_number": 41001,
    "gid_number": 4100,
}


def test_sign_in_with_the_provider_lands_home_as_the_mapped_program_manager(
    browser, live_server, provider, use_sso, budget_tree
):
    issuer = provider(f"{live_server.url}/oidc/callback/", {"alice": ALICE})
    use_sso(
        issuer,
        "nlp-pm=program_manager:nlp, gpu-leads=leadership:/",
        ALLOT_OIDC_SCOPES="openid email profile groups posix",
        ALLOT_OIDC_POSIX_CLAIM="posix_username",
        ALLOT_OIDC_UID_CLAIM="uid_number",
        ALLOT_OIDC_GID_CLAIM="gid_number",
        AXES_ENABLED=True,  # as in production: the callback passes the login throttle
    )
    page = browser.new_context().new_page()
    page.goto(f"{live_server.url}/budgets/")  # a login-only page: to /login/?next=/budgets/
    page.click("text=Sign in with Test IdP")

    page.wait_for_selector("input[name=login]")  # the provider's own login form
    assert page.url.startswith(issuer)
    page.fill("input[name=login]", "alice")
    page.fill("input[name=password]", "anything")
    page.click("button[type=submit]")
    page.click("text=Continue")  # the provider's consent page

    page.wait_for_url(f"{live_server.url}/budgets/")
    assert "Language models" in page.content()  # nlp, where alice now manages
    assert "Vision" not in page.content()  # another program: out of her scope
    page.goto(f"{live_server.url}/")
    assert "Welcome, Alice Okafor" in page.inner_text("h1")
    home = page.inner_text("main")  # her mapped role's panel: nlp's projects, not vision's
    assert "Your projects" in home and "nlp/olmo" in home and "vision" not in home

    role = Role.objects.get(user__username="alice")
    assert (role.role, role.node) == (Role.Kind.PROGRAM_MANAGER, budget_tree.nlp)
    audit = AuditEntry.objects.get(action=AuditEntry.Action.GRANT_ROLE)
    assert (audit.node, audit.actor, audit.new) == (
        budget_tree.nlp,
        None,
        "program_manager for alice",
    )
    account = PosixAccount.objects.get(user__username="alice")
    assert (account.name, account.uid, account.gid) == ("aokafor", 41001, 4100)


def test_a_provider_refusing_the_code_exchange_returns_to_the_login_page(
    browser, live_server, provider, use_sso, budget_tree
):
    issuer = provider(f"{live_server.url}/oidc/callback/", {"alice": ALICE})
    use_sso(issuer, ALLOT_OIDC_CLIENT_SECRET="not-the-secret")  # the provider refuses it
    page = browser.new_context().new_page()
    page.goto(f"{live_server.url}/login/")
    page.click("text=Sign in with Test IdP")
    page.fill("input[name=login]", "alice")
    page.fill("input[name=password]", "anything")
    page.click("button[type=submit]")
    page.click("text=Continue")

    page.wait_for_url(f"{live_server.url}/login/?sso=failed")
    assert "Single sign-on did not complete" in page.inner_text("main")
    assert not Role.objects.filter(user__username="alice").exists()
