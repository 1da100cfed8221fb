"""The fault driver's moving parts: Celery workers it kills, beat, and the agent it asks.

Workers run the prefork pool with one child, so there are two ways to kill one, both SIGKILL:
the whole worker (master and child: a lost machine; restarted by the driver, cold) and the pool
child that executes the task (the master forks a new one). A worker may also be started with
``ALLOT_FAULT_POINTS`` naming one fault point (core/faults.py): its child then kills itself
there, at a random hit, as often as it gets there, until the driver restarts the worker clean.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POINTS = [
    "commit.before_enqueue",
    "dispatch.before_submit",
    "dispatch.after_submit",
    "stop.after_backend",
    "reconcile.job",
    "reconcile.orphans",
    "reconcile.finish_charged",
    "pass.locked",
    "pass.before_commit",
    "charge.job",
]
# Between commit and dispatch, around the backend call and mid-reconcile: the ones that matter.
WEIGHTED_POINTS = POINTS + [
    "commit.before_enqueue",
    "commit.before_enqueue",
    "dispatch.after_submit",
    "dispatch.after_submit",
    "dispatch.before_submit",
    "reconcile.job",
]


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ..." — comm may hold spaces, so split after the last ")"
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


class Agent:
    """The helper process that reads and writes the system's private database."""

    def __init__(self, env: dict, log: Path):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.agent"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(log, "a"),  # noqa: SIM115 - closed with the process
            text=True,
        )
        self.lock = threading.Lock()

    def __call__(self, cmd: str, **kwargs) -> dict:
        with self.lock:
            self.process.stdin.write(json.dumps({"cmd": cmd, **kwargs}) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the agent died (exit {self.process.poll()})")
        reply = json.loads(line)
        if not reply["ok"]:
            raise RuntimeError(f"agent {cmd}: {reply['error']}\n{reply.get('tb', '')}")
        return reply["result"]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


class Worker:
    """One Celery worker (prefork, one child) the driver keeps killing and restarting."""

    def __init__(self, index: int, env: dict, queue: str, logdir: Path, counts: Counter):
        self.index, self.env, self.queue, self.logdir = index, env, queue, logdir
        self.counts = counts
        self.process: subprocess.Popen | None = None
        self.point = ""
        self.generation = 0
        self.log = logdir / f"worker{index}.log"
        self.started: list[subprocess.Popen] = []  # every incarnation, for the teardown

    def start(self, point: str = "", chance: float = 0.5) -> None:
        self.generation += 1
        self.point = point
        env = dict(self.env)
        if point:
            env.update(ALLOT_FAULT_POINTS=point, ALLOT_FAULT_CHANCE=str(chance))
        self._offset = self.log.stat().st_size if self.log.exists() else 0
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "portal", "worker", "--pool", "prefork",
             "--concurrency", "1", "--queues", self.queue, "--loglevel", "INFO",
             "-n", f"w{self.index}g{self.generation}@faults",
             "--without-heartbeat", "--without-gossip", "--without-mingle"],
            cwd=ROOT, env=env, stdout=open(self.log, "a"), stderr=subprocess.STDOUT,  # noqa: SIM115
            start_new_session=True,  # its own process group: one killpg takes master and child
        )  # fmt: skip
        self.started.append(self.process)

    def wait_ready(self, timeout: float = 60) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            with open(self.log, "rb") as handle:
                handle.seek(self._offset)
                if b" ready." in handle.read():
                    return True
            time.sleep(0.1)
        return False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill_worker(self) -> None:
        """SIGKILL master and child at once, as a lost machine."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.counts["worker"] += 1
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)

    def kill_child(self) -> bool:
        """SIGKILL the pool process that executes tasks, wherever it is."""
        if not self.alive():
            return False
        for pid in children_of(self.process.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            self.counts["child"] += 1
            return True
        return False

    def stop(self) -> None:
        """Teardown, not a fault: nothing of any incarnation may outlive the test."""
        for process in self.started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)


class Beat:
    def __init__(self, env: dict, logdir: Path):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "portal", "beat", "--loglevel", "INFO",
             "-s", str(logdir / "beat-schedule")],
            cwd=ROOT, env=env, stdout=open(logdir / "beat.log", "a"),  # noqa: SIM115
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)


class KillLoop(threading.Thread):
    """Keeps one worker dying at random moments while ``faults`` is set.

    Each incarnation lives 3–8 s after it says it is ready. 70% of incarnations carry a fault
    point (the ones between commit and dispatch and mid-reconcile weighted up), where its pool
    child dies at random hits and is forked again by the master. Meanwhile the child is also
    killed at random moments (every second on average). At the end of its life the whole worker
    (master and child) is killed and a new one started, cold.
    """

    def __init__(self, worker: Worker, faults: threading.Event, stop: threading.Event, seed: int):
        super().__init__(daemon=True)
        self.worker, self.faults, self.stop_event = worker, faults, stop
        self.rng = random.Random(seed)
        self.error: BaseException | None = None
        self.clean = threading.Event()  # set while a clean worker is up and faults are off

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _run(self) -> None:
        while not self.stop_event.is_set():
            if not self.faults.is_set():
                if not self.worker.alive() or self.worker.point:
                    if self.worker.alive():
                        self.worker.kill_worker()
                    self.worker.start()
                    if not self.worker.wait_ready():
                        raise RuntimeError(f"worker {self.worker.index} did not start")
                self.clean.set()
                time.sleep(0.1)
                continue
            self.clean.clear()
            if self.worker.alive():  # the clean worker of the last settle dies at a random moment
                time.sleep(self.rng.uniform(0, 1.5))
                self.worker.kill_worker()
            point = self.rng.choice(WEIGHTED_POINTS) if self.rng.random() < 0.7 else ""
            self.worker.start(point, chance=self.rng.choice([0.3, 0.6, 1.0]))
            if not self.worker.wait_ready():
                if self.worker.alive():
                    raise RuntimeError(f"worker {self.worker.index} did not start")
                continue
            end = time.monotonic() + self.rng.uniform(3.0, 8.0)
            while self.faults.is_set():
                wait = self.rng.expovariate(1 / 1.0)
                if time.monotonic() + wait >= end:
                    time.sleep(max(0.0, end - time.monotonic()))
                    break
                time.sleep(wait)
                self.worker.kill_child()
            if self.faults.is_set() or self.worker.point:
                self.worker.kill_worker()
