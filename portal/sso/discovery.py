"""The issuer's OpenID Connect discovery document, fetched on first use with a timeout.

Read lazily (not in settings) so Allot starts, and password users still log in, while the
identity provider is down; kept per process for ``ALLOT_OIDC_DISCOVERY_TTL_S``. A failure is
not kept: the next sign-in asks again.
"""

import threading
import time

import requests
from django.conf import settings

REQUIRED = ("authorization_endpoint", "token_endpoint", "jwks_uri")
_cache: dict[str, tuple[float, dict]] = {}
_lock = threading.Lock()


class DiscoveryError(Exception):
    pass


def document() -> dict:
    issuer = settings.ALLOT_OIDC_ISSUER.rstrip("/")
    with _lock:
        cached = _cache.get(issuer)
        if cached and time.monotonic() - cached[0] < settings.ALLOT_OIDC_DISCOVERY_TTL_S:
            return cached[1]
    url = f"{issuer}/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=settings.ALLOT_OIDC_TIMEOUT_S)
        response.raise_for_status()
        doc = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise DiscoveryError(f"cannot read {url}: {exc}") from exc
    # OpenID Connect Discovery 1.0, section 4.3: the document must name the issuer asked for,
    # or tokens it signs could pass for another issuer's.
    if not isinstance(doc, dict) or str(doc.get("issuer", "")).rstrip("/") != issuer:
        raise DiscoveryError(f"{url} names another issuer: {doc.get('issuer')!r}")
    missing = [key for key in REQUIRED if not doc.get(key)]
    if missing:
        raise DiscoveryError(f"{url} lacks {', '.join(missing)}")
    with _lock:
        _cache[issuer] = (time.monotonic(), doc)
    return doc


def endpoint(key: str) -> str | None:
    return document().get(key)


def forget() -> None:
    with _lock:
        _cache.clear()
