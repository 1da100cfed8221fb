"""The fault lab: a private PostgreSQL and Redis for the whole fault session, and a system
(database, beat, killable workers, agent) per test. See docs/failure-modes.md."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.faults.harness import ROOT, Agent, Beat, KillLoop, Worker
from tests.faults.services import Postgres, Redis

ROUNDS = int(os.environ.get("ALLOT_FAULT_ROUNDS", "6"))
KILLS_PER_ROUND = int(os.environ.get("ALLOT_FAULT_KILLS_PER_ROUND", "18"))
WORKERS = int(os.environ.get("ALLOT_FAULT_WORKERS", "2"))
SYNC_INTERVAL_S = 1
CHARGE_INTERVAL_S = 2
# How long anything may sit between two states once the workers are up again: a sync interval,
# the queue a restarted worker finds, and a loaded CI machine.
GRACE_S = float(os.environ.get("ALLOT_FAULT_GRACE_S", "5"))
# Once the workers are back, how long the loop has at most to repair what the faults left.
SETTLE_S = GRACE_S + 1


@dataclass
class System:
    name: str
    root: Path
    env: dict
    agent: Agent
    beat: Beat
    workers: list[Worker]
    loops: list[KillLoop]
    faults: threading.Event
    stop: threading.Event
    counts: Counter
    fault_log: Path
    notes: dict = field(default_factory=dict)
    # How long the loop has to repair after the workers are back (SETTLE_S; longer where a
    # backend restarted by the faults needs time to answer again).
    settle_s: float = SETTLE_S

    def point_kills(self) -> Counter:
        if not self.fault_log.exists():
            return Counter()
        return Counter(line.split()[2] for line in self.fault_log.read_text().splitlines())

    def kills(self) -> int:
        return self.counts["worker"] + self.counts["child"] + sum(self.point_kills().values())

    def check_loops(self) -> None:
        for loop in self.loops:
            if loop.error:
                raise loop.error

    def quiesce(self, timeout: float = 120) -> float:
        """Faults off; wait until every worker is up again, clean. Returns when the faults
        stopped (monotonic)."""
        self.faults.clear()
        off = time.monotonic()
        deadline = off + timeout
        for loop in self.loops:
            while not loop.clean.wait(0.1):
                self.check_loops()
                assert time.monotonic() < deadline, "workers did not come back"
        return off

    def settled_check(self, off: float, final: bool = False) -> dict:
        """The checks, once the loop has settled after the faults stopped at ``off``.

        Not before every state the faults left between two others is older than the grace
        (so each must have been repaired by then), and again every half second while they
        find something, until SETTLE_S after the workers came back: the loop has that long to
        repair what the faults left, and no longer. Whatever is still wrong then is reported.
        The final check (after the drain) runs once.
        """
        back = time.monotonic()
        time.sleep(max(0.0, off + GRACE_S + 1 - back))
        repaired: list[str] = []  # found by an earlier look, gone by the last one
        while True:
            result = self.check(final)
            if final or not result["violations"] or time.monotonic() >= back + self.settle_s:
                result["repaired_while_settling"] = sorted(set(repaired))
                return result
            repaired += result["violations"]
            time.sleep(0.5)

    def check(self, final: bool = False) -> dict:
        return self.agent(
            "check",
            cluster_name=self.name,
            grace_s=GRACE_S,
            charge_interval_s=CHARGE_INTERVAL_S,
            final=final,
        )


class FaultLab:
    def __init__(self, root: Path):
        self.root = root
        self.pg = Postgres(root / "pg")
        self.redis = Redis(root / "redis")

    def start(self) -> None:
        self.pg.init()
        self.redis.start()
        self.pg.sql("CREATE DATABASE faults_template")
        env = self.env("faults_template", "unused")
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT, env=env, check=True, timeout=600,
        )  # fmt: skip

    def env(self, db: str, queue: str) -> dict:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("ALLOT_", "CELERY_", "DATABASE_", "REDIS_"))
        }
        env.update(
            DJANGO_SETTINGS_MODULE="portal.settings",
            DATABASE_URL=f"{self.pg.url_base}/{db}",
            REDIS_URL=self.redis.url,
            CELERY_BROKER_URL=self.redis.url,
            ALLOT_CELERY_QUEUE=queue,
            ALLOT_VAR_DIR=str(self.root / db / "var"),
            ALLOT_CLUSTER_FILES_DIR=str(self.root),  # the simulated cluster's state lives here
            ALLOT_PASS_INTERVAL_S="1",
            ALLOT_SYNC_INTERVAL_S=str(SYNC_INTERVAL_S),
            ALLOT_CHARGE_INTERVAL_S=str(CHARGE_INTERVAL_S),
            LOG_LEVEL="WARNING",
            PYTHONUNBUFFERED="1",
        )
        return env

    def system(self, name: str, backend: str, options: dict, cost_factor: str, seed: int):
        db = f"faults_{name.replace('-', '_')}"
        self.pg.sql(f"CREATE DATABASE {db} TEMPLATE faults_template")
        logdir = self.root / db
        logdir.mkdir(parents=True, exist_ok=True)
        fault_log = logdir / "fault-points.log"
        env = self.env(db, f"faults-{uuid.uuid4().hex[:6]}")
        env["ALLOT_FAULT_LOG"] = str(fault_log)
        agent = Agent(env, logdir / "agent.log")
        agent("setup", backend=backend, cluster=name, options=options, cost_factor=cost_factor)
        beat = Beat(env, logdir)
        counts: Counter = Counter()
        faults, stop = threading.Event(), threading.Event()
        workers = [
            Worker(i, env, env["ALLOT_CELERY_QUEUE"], logdir, counts) for i in range(WORKERS)
        ]
        loops = [KillLoop(w, faults, stop, seed + w.index) for w in workers]
        for loop in loops:
            loop.start()
        return System(name, logdir, env, agent, beat, workers, loops, faults, stop, counts,
                      fault_log)  # fmt: skip

    def teardown_system(self, system: System) -> None:
        system.faults.clear()
        system.stop.set()
        for loop in system.loops:
            loop.join(timeout=60)
        for worker in system.workers:
            worker.stop()
        system.beat.stop()
        system.agent.close()

    def stop(self) -> None:
        self.redis.stop()
        self.pg.stop("immediate")


@pytest.fixture(scope="session")
def fault_lab():
    root = Path(tempfile.mkdtemp(prefix="allot-faults-"))
    root.chmod(0o755)  # the postgres user must reach its data directory below
    lab = FaultLab(root)
    try:
        lab.start()
        yield lab
    finally:
        lab.stop()
        if os.environ.get("ALLOT_FAULT_KEEP") != "1":
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"fault lab kept in {root}")
