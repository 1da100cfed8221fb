"""The user's API tokens: list, create (the secret is shown once), revoke."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal import tokens

TEMPLATE = "portal/tokens.html"


@login_required
def token_list(request):
    return render(request, TEMPLATE, {"tokens": tokens.live_tokens(request.user)})


@login_required
@require_POST
def token_new(request):
    instance, secret = tokens.issue_token(request.user)
    context = {"tokens": tokens.live_tokens(request.user), "new_token": secret, "new": instance}
    return render(request, TEMPLATE, context)


@login_required
@require_POST
def token_revoke(request, key):
    if not tokens.revoke_token(request.user, key):
        raise Http404("No such token")
    messages.success(request, f"Token {key[:8]}… revoked.")
    return redirect("account-tokens")
