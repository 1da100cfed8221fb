"""Replay one workload under the current and the proposed grants.

The workload goes through the same files and readers as ``manage.py simulate`` (a scratch
folder, ``load_scenario``/``load_trace``), so a preview and an operator's replay of the
exported folder agree to the byte. Only the budgets differ between the two replays.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from django.conf import settings

from scheduling.engine.sim import Simulator, load_scenario, load_trace
from scheduling.engine.sim.output import to_json
from whatif.export import budget_mappings

Progress = Callable[[float], None]


def proposed_scenario(scenario: dict, grants: dict, weights: dict, per_window: float, proposal):
    """The scenario with ``proposal`` (path -> GPU-hours) replacing those grants; a node's
    share follows its new grant unless a weight overrides it."""
    merged = {**grants, **{p: float(v) for p, v in proposal.items()}}
    out = copy.deepcopy(scenario)
    out["budgets"] = budget_mappings(merged, weights, per_window)
    return out


def pass_interval_s() -> float:
    return float(settings.ALLOT_WHATIF_PASS_INTERVAL_S)


def _write(folder: str, scenario: dict, trace_csv: str) -> tuple[Path, Path]:
    sc_path, tr_path = Path(folder, "scenario.yaml"), Path(folder, "trace.csv")
    sc_path.write_text(yaml.safe_dump(scenario, sort_keys=False), encoding="utf-8")
    tr_path.write_text(trace_csv, encoding="utf-8")
    return sc_path, tr_path


class Background:
    """One replay in a child process (``manage.py simulate`` on the written files), so the
    current and the proposed replay use two cores; ``result()`` waits for it."""

    def __init__(self, scenario: dict, trace_csv: str, until_s: float):
        self.folder = tempfile.TemporaryDirectory(prefix="allot-whatif-")
        sc_path, tr_path = _write(self.folder.name, scenario, trace_csv)
        self.out = Path(self.folder.name, "out.json")
        command = [
            sys.executable, str(Path(settings.BASE_DIR, "manage.py")), "simulate",
            str(sc_path), str(tr_path), "--until", repr(float(until_s)),
            "--pass-interval", repr(pass_interval_s()), "--json", str(self.out),
        ]  # fmt: skip
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ)
        )

    def result(self, timeout: float | None = None) -> dict:
        try:
            _, err = self.process.communicate(timeout=timeout)
            if self.process.returncode != 0:
                raise RuntimeError(f"the replay failed: {err.decode(errors='replace')[-500:]}")
            result = json.loads(self.out.read_text(encoding="utf-8"))
            result["wall_s"] = round(time.perf_counter() - self.started, 3)
            return result
        finally:
            self.stop()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.folder.cleanup()


def in_background(jobs: int) -> bool:
    """Large workloads replay the proposal in a second process (small ones are done before
    a child process would have started)."""
    return jobs >= int(settings.ALLOT_WHATIF_PARALLEL_JOBS)


def replay(
    scenario: dict, trace_csv: str, until_s: float, progress: Progress | None = None
) -> dict:
    """The simulator's contract JSON for one fair-share replay of the weeks the trace covers
    (``until_s``: from its first submission to the moment it was read)."""
    with tempfile.TemporaryDirectory(prefix="allot-whatif-") as folder:
        sc_path, tr_path = _write(folder, scenario, trace_csv)
        sc, jobs = load_scenario(str(sc_path)), load_trace(str(tr_path), until_s)
    end = until_s or 1.0
    tick = None
    if progress is not None:

        def tick(t: float) -> None:
            progress(min(1.0, t / end))

    started = time.perf_counter()
    sim = Simulator(
        sc,
        jobs,
        "fairshare",
        until_s=until_s,
        pass_interval_s=pass_interval_s(),
        record_events=False,
        progress=tick,
    )
    result = to_json(sim.run())
    result["wall_s"] = round(time.perf_counter() - started, 3)
    return result
