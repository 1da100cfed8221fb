"""Single sign-on fixtures: Allot configured for a provider, and a real provider (oidc-provider
on Node, tests/sso/provider) on a free port."""

import json
import shutil
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from budgets.rolemap import parse_role_map
from portal.sso import discovery
from tests.browser.conftest import allow_sync_orm_under_playwright, browser  # noqa: F401
from tests.conftest import service_missing

PROVIDER_DIR = Path(__file__).parent / "provider"
CLIENT_ID, CLIENT_SECRET = "allot", "test-client-secret"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(autouse=True)
def fresh_discovery():
    discovery.forget()
    yield
    discovery.forget()


@pytest.fixture
def use_sso(settings):
    """Allot as an OIDC client of ``issuer``, with the given role map and claims."""

    def configure(issuer, role_map="", **more):
        settings.ALLOT_OIDC_ISSUER = issuer
        settings.ALLOT_OIDC_CLIENT_ID = CLIENT_ID
        settings.ALLOT_OIDC_CLIENT_SECRET = CLIENT_SECRET
        settings.ALLOT_OIDC_PROVIDER_NAME = "Test IdP"
        settings.ALLOT_OIDC_ROLE_MAP = parse_role_map(role_map)
        settings.ALLOT_OIDC_TIMEOUT_S = 5
        for name, value in more.items():
            setattr(settings, name, value)
        return settings

    return configure


@pytest.fixture
def provider(tmp_path):
    """A running oidc-provider; returns a function ``start(redirect_uri, accounts) -> issuer``."""
    node = shutil.which("node")
    if not node:
        service_missing("node is not installed (Debian: nodejs)")
    if not (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir():
        service_missing("oidc-provider is not installed: npm ci --prefix tests/sso/provider")
    processes = []

    def start(redirect_uri: str, accounts: dict) -> str:
        port = free_port()
        config = tmp_path / "provider.json"
        config.write_text(
            json.dumps(
                {
                    "port": port,
                    "client": {
                        "client_id": CLIENT_ID,
                        "client_secret": CLIENT_SECRET,
                        "redirect_uris": [redirect_uri],
                        "token_endpoint_auth_method": "client_secret_post",
                    },
                    "accounts": accounts,
                }
            )
        )
        process = subprocess.Popen(
            [node, "provider.mjs", str(config)],
            cwd=PROVIDER_DIR,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        processes.append(process)
        line = process.stdout.readline()  # blocks until it listens, or it died (EOF)
        if not line.startswith("ready "):
            pytest.fail(f"the OIDC provider did not start (exit {process.poll()})")
        return line.split()[1]

    yield start
    for process in processes:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def issuer_serving():
    """An issuer at a free port serving the discovery document ``make(issuer)`` returns."""
    servers = []

    def serve(make):
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = json.dumps(make(issuer)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = HTTPServer(("127.0.0.1", 0), Handler)
        issuer = f"http://127.0.0.1:{server.server_port}"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return issuer

    yield serve
    for server in servers:
        server.shutdown()


def document_for(issuer):
    return {
        "issuer": issuer,
        "authorization_endpoint": f"{issuer}/auth",
        "token_endpoint": f"{issuer}/token",
        "jwks_uri": f"{issuer}/jwks",
    }


@pytest.fixture
def hanging_issuer():
    """A port that accepts connections and never answers; counts the connections."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    accepted = []

    def accept():
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            accepted.append(conn)  # held open, never answered

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}", accepted
    sock.close()
    for conn in accepted:
        conn.close()
