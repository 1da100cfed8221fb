from django import forms
from django.contrib.auth.forms import AuthenticationForm


class LoginForm(AuthenticationForm):
    """Django's login form with a bound on the password too: hashing megabytes with PBKDF2
    on every try would be a cheap way to burn the web workers."""

    password = forms.CharField(
        label="Password",
        strip=False,
        max_length=4096,
        widget=forms.PasswordInput(attrs={"autocomplete": "current-password"}),
    )
