"""Throwaway PostgreSQL and Redis servers that the fault suite may restart at will.

The rest of the suite (and anyone else on the machine) uses the shared servers from
DATABASE_URL and REDIS_URL; restarting those would break them. So the suite starts its own,
on free ports under a temporary directory, and restarts only those.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.conftest import service_missing, tcp_open


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not come up within {timeout:.0f} s")


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    root = Path("/usr/lib/postgresql")
    for version in sorted(root.iterdir(), reverse=True) if root.exists() else []:
        if (version / "bin" / name).exists():
            return str(version / "bin" / name)
    return None


class Postgres:
    """One PostgreSQL cluster in ``root``; run as the ``postgres`` user when we are root
    (PostgreSQL refuses to run as root)."""

    def __init__(self, root: Path):
        initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
        if not initdb or not pg_ctl:
            service_missing("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
        self.initdb, self.pg_ctl = initdb, pg_ctl
        self.root = root
        self.data = root / "data"
        self.port = free_port()
        self.restarts = 0
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    @property
    def url_base(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*self.as_user, *args], check=check, capture_output=True, text=True, timeout=120
        )

    def init(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.as_user:
            shutil.chown(self.root, "postgres", "postgres")
        self._run(self.initdb, "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8")
        self.start()

    def start(self) -> None:
        # fsync off: the machine never crashes here, only the server does, and what PostgreSQL
        # wrote is in the kernel's cache. synchronous_commit stays on: with it off, a commit is
        # acknowledged before its WAL is written, so an immediate restart loses the last
        # ~0.6 s of acknowledged commits (a dispatched start, a submitted job whose id is then
        # given again) — a loss no real PostgreSQL restart causes, which the suite then blamed
        # on Allot ("backend attempt ... was never started").
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=off "
            "-c synchronous_commit=on -c full_page_writes=off -c max_connections=100"
        )
        self._run(
            self.pg_ctl, "-D", str(self.data), "-l", str(self.root / "log"), "-o", options,
            "-w", "-t", "60", "start",
        )  # fmt: skip
        _wait(lambda: tcp_open("127.0.0.1", self.port), 60, "PostgreSQL")

    def stop(self, mode: str = "fast") -> None:
        self._run(self.pg_ctl, "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop",
                  check=False)  # fmt: skip

    def restart(self, mode: str = "immediate") -> None:
        """``immediate`` is a crash: no checkpoint, every connection cut, recovery at start."""
        self.stop(mode)
        self.start()
        self.restarts += 1

    def sql(self, statement: str, db: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(f"{self.url_base}/{db}", autocommit=True) as conn:
            conn.execute(statement)


class Redis:
    def __init__(self, root: Path):
        self.binary = shutil.which("redis-server")
        if not self.binary:
            service_missing("redis-server is not installed")
        self.root = root
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        log = open(self.root / "redis.log", "a")  # noqa: SIM115 - lives as long as the server
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.root)],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        _wait(lambda: tcp_open("127.0.0.1", self.port), 30, "Redis")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def restart(self) -> None:
        """A crash without persistence: every queued and unacknowledged message is gone."""
        self.stop()
        self.start()
        self.restarts += 1
