"""The simulated cluster the demo runs on: jobs run in accelerated wall-clock time.

State lives in a small JSON file per cluster (under ``ALLOT_VAR_DIR/simcluster``) guarded by an
``fcntl`` lock, because the web process, the worker and beat all talk to the same fake cluster
and no server may be required for the demo. Options:

- ``nodes`` (default 4), ``gpus_per_node`` (8), ``gpu_type`` (H100), ``prefix`` (cluster name):
  the shape reported by ``discover_nodes``; nodes are ``<prefix>-<NN>``. ``gpu_types`` (a comma
  list, one type per node, e.g. ``H100,H100,B200``) makes a cluster of several GPU types.
- ``speed`` (default 60): simulated seconds per real second, so an 8 h job lasts 8 minutes.
- ``state_dir``: where the state file lives.

An outage can be staged for demos and tests: while ``<cluster>.down`` exists beside the state
file, every call raises BackendUnavailable, as a controller that does not answer would.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from scheduling.backends.base import (
    Backend,
    BackendError,
    BackendUnavailable,
    LaunchSpec,
    NodeInfo,
    RemoteJob,
    RemoteState,
)


def _default_state_dir() -> Path:
    return Path(os.environ.get("ALLOT_VAR_DIR", "var")) / "simcluster"


def simulated_utilization(job_id: int, name: str) -> float:
    """A stable per-job GPU utilisation; about one job in twelve (or any named *idle*) squats."""
    if "idle" in name.lower():
        return 0.02
    digest = int(hashlib.sha256(f"{job_id}".encode()).hexdigest()[:8], 16)
    if digest % 12 == 0:
        return 0.03
    return 0.55 + (digest % 40) / 100


class SimulatedBackend(Backend):
    name = "simulated"

    def __init__(
        self,
        cluster_name: str,
        options: dict[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ):
        super().__init__(cluster_name, options)
        self.clock = clock
        try:
            self.node_count = int(self.options.get("nodes", 4))
            self.gpus_per_node = int(self.options.get("gpus_per_node", 8))
            self.speed = float(self.options.get("speed", 60))
        except ValueError as exc:
            raise BackendError(
                f"options: simulated cluster options must be numbers: {exc}"
            ) from exc
        self.gpu_type = self.options.get("gpu_type", "H100")
        self.prefix = self.options.get("prefix", cluster_name)
        state_dir = Path(self.options.get("state_dir") or _default_state_dir())
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / f"{cluster_name}.json"

    # -- state file -----------------------------------------------------------------------------
    @property
    def outage_flag(self) -> Path:
        return self.path.with_suffix(".down")

    def set_outage(self, down: bool) -> None:
        if down:
            self.outage_flag.touch()
        else:
            self.outage_flag.unlink(missing_ok=True)

    @contextmanager
    def _state(self) -> Iterator[dict]:
        if self.outage_flag.exists():
            raise BackendUnavailable(f"simulated cluster {self.cluster_name} does not answer")
        lock_path = self.path.with_suffix(".lock")
        with open(lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                state = json.loads(self.path.read_text()) if self.path.exists() else {}
                state.setdefault("jobs", {})
                state.setdefault("drained", {})
                state.setdefault("next_id", 1)
                yield state
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(json.dumps(state, sort_keys=True))
                tmp.replace(self.path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _advance(self, state: dict) -> None:
        now = self.clock()
        for record in state["jobs"].values():
            if record["state"] != RemoteState.RUNNING:
                continue
            simulated = (now - record["started_wall"]) * self.speed
            if record["duration_s"] is not None and simulated >= record["duration_s"]:
                record["state"] = RemoteState.COMPLETED
                record["exit_code"] = 0
                record["ended_wall"] = record["started_wall"] + record["duration_s"] / self.speed

    @staticmethod
    def _remote(record: dict) -> RemoteJob:
        return RemoteJob(
            job_id=record["job_id"],
            external_id=record["external_id"],
            attempt_key=record["attempt_key"],
            state=RemoteState(record["state"]),
            nodes=tuple(record["nodes"]),
            exit_code=record.get("exit_code"),
            gpu_utilization=record.get("utilization"),
            ended_at=record.get("ended_wall"),
            started_at=record.get("started_wall"),
        )

    # -- Backend interface ----------------------------------------------------------------------
    def discover_nodes(self) -> list[NodeInfo]:
        with self._state() as state:
            drained = state["drained"]
        return [
            NodeInfo(
                name=f"{self.prefix}-{index:02d}",
                gpus=self.gpus_per_node,
                gpu_type=self._type_of(index),
                drained=f"{self.prefix}-{index:02d}" in drained,
                reason=drained.get(f"{self.prefix}-{index:02d}", ""),
            )
            for index in range(self.node_count)
        ]

    def _type_of(self, index: int) -> str:
        types = [t.strip() for t in self.options.get("gpu_types", "").split(",") if t.strip()]
        return types[index] if index < len(types) else self.gpu_type

    def submit(self, spec: LaunchSpec) -> RemoteJob:
        known = {f"{self.prefix}-{i:02d}" for i in range(self.node_count)}
        unknown = [n for n in spec.nodes if n not in known]
        if unknown:
            raise BackendError(f"nodes: unknown node(s) {', '.join(unknown)}")
        with self._state() as state:
            existing = state["jobs"].get(spec.attempt_key)
            if existing is not None:
                return self._remote(existing)
            record = {
                "job_id": spec.job_id,
                "external_id": f"sim-{state['next_id']}",
                "attempt_key": spec.attempt_key,
                "state": RemoteState.RUNNING,
                "nodes": list(spec.nodes),
                "duration_s": spec.sim_duration_s,
                "started_wall": self.clock(),
                "utilization": simulated_utilization(spec.job_id, spec.name),
            }
            state["next_id"] += 1
            state["jobs"][spec.attempt_key] = record
            return self._remote(record)

    def _stop(self, external_id: str, new_state: RemoteState) -> None:
        with self._state() as state:
            self._advance(state)
            for record in state["jobs"].values():
                if record["external_id"] == external_id and record["state"] == RemoteState.RUNNING:
                    record["state"] = new_state
                    record["ended_wall"] = self.clock()

    def preempt(self, job_id: int, external_id: str) -> None:
        self._stop(external_id, RemoteState.PREEMPTED)

    def cancel(self, job_id: int, external_id: str) -> None:
        self._stop(external_id, RemoteState.CANCELLED)

    def sync(self) -> list[RemoteJob]:
        with self._state() as state:
            self._advance(state)
            # Forget finished attempts after an hour so the file stays small.
            horizon = self.clock() - 3600
            state["jobs"] = {
                key: rec
                for key, rec in state["jobs"].items()
                if rec["state"] == RemoteState.RUNNING or rec.get("ended_wall", 0) > horizon
            }
            return [self._remote(rec) for rec in state["jobs"].values()]

    def drain_node(self, node: str, reason: str) -> None:
        with self._state() as state:
            state["drained"][node] = reason or "drained"

    def undrain_node(self, node: str) -> None:
        with self._state() as state:
            state["drained"].pop(node, None)
