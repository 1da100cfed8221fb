"""One small wrapper around httpx: the token header, the JSON error shape of the API
(``{"message", "field", "errors"}``) turned into exit codes, pages followed."""

from __future__ import annotations

import logging

import httpx

from allot_cli import __version__
from allot_cli.errors import NotAuthenticated, Refused, Unreachable

TIMEOUT = httpx.Timeout(30.0, connect=10.0)
GATEWAY = {502, 503, 504}  # a proxy in front answering for a server that is down
# httpx logs every request at INFO: noise on a terminal whose program set up logging.
logging.getLogger("httpx").setLevel(logging.WARNING)


class Client:
    def __init__(self, url: str, token: str | None = None, transport=None):
        self.base = url.rstrip("/")
        headers = {"Accept": "application/json", "User-Agent": f"allot-cli/{__version__}"}
        if token:
            headers["Authorization"] = f"Token {token}"
        self.http = httpx.Client(
            base_url=self.base, headers=headers, timeout=TIMEOUT, transport=transport
        )

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.http.close()

    def request(self, method: str, path: str, **kwargs):
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.InvalidURL as exc:
            raise Unreachable(f"bad server URL {self.base!r}: {exc}") from None
        except httpx.HTTPError as exc:
            raise Unreachable(f"cannot reach {self.base}: {_reason(exc)}") from None
        if response.status_code == 401:
            raise NotAuthenticated(
                f"not authenticated at {self.base}: {_message(response)} (run `allot login` again)"
            )
        if response.status_code in GATEWAY:
            raise Unreachable(f"{self.base} is unavailable ({response.status_code})")
        if response.status_code >= 400:
            raise Refused(_message(response), response.status_code, _json(response))
        if response.status_code == 204 or not response.content:
            return None
        body = _json(response)
        if body is None:
            raise Unreachable(f"{self.base} did not answer with JSON: is it an Allot server?")
        return body

    def get(self, path: str, **params):
        return self.request("GET", path, params={k: v for k, v in params.items() if v})

    def post(self, path: str, payload: dict | None = None):
        return self.request("POST", path, json=payload or {})

    def get_all(self, path: str, limit: int = 2000, **params) -> list:
        """Every row of a paginated list (``{"results", "next"}``), up to ``limit`` rows."""
        body = self.get(path, **params)
        if isinstance(body, list):
            return body[:limit]
        rows = list(body.get("results", []))
        while body.get("next") and len(rows) < limit:
            following = self.http.base_url.join(httpx.URL(body["next"]))
            if _origin(following) != _origin(self.http.base_url):
                # The token goes only to the origin the user logged in to: another port of the
                # same host is another service, and plain http is readable on the way.
                raise Refused(
                    "the server sent the next page to another host, port or scheme: "
                    f"{following.scheme}://{following.netloc.decode('ascii', 'replace')}"
                )
            body = self.request("GET", following)
            rows.extend(body.get("results", []))
        return rows[:limit]


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    """Scheme, host and port (httpx folds a scheme's default port to None and the host to
    lower case), the way a browser's same-origin rule compares them."""
    return (url.scheme, url.host, url.port)


def _json(response):
    try:
        return response.json()
    except ValueError:
        return None


def _message(response) -> str:
    body = _json(response)
    if isinstance(body, dict):
        text = body.get("message") or body.get("detail")
        if text:
            return " ".join(str(text).split())
    return f"the server answered {response.status_code} {response.reason_phrase}".strip()


def _reason(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    if "Connection refused" in text or "Errno 111" in text:
        return "connection refused"
    return text.splitlines()[0]
