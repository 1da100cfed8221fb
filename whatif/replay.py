"""Replay one workload under the current and the proposed grants.

The workload goes through the same files and readers as ``manage.py simulate`` (a scratch
folder, ``load_scenario``/``load_trace``), so a preview and an operator's replay of the
exported folder agree to the byte. Only the budgets differ between the two replays.
"""

from __future__ import annotations

import copy
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
    return float(getattr(settings, "ALLOT_WHATIF_PASS_INTERVAL_S", 60))


def replay(
    scenario: dict, trace_csv: str, until_s: float, progress: Progress | None = None
) -> dict:
    """The simulator's contract JSON for one fair-share replay of the weeks the trace covers
    (``until_s``: from its first submission to the moment it was read)."""
    with tempfile.TemporaryDirectory(prefix="allot-whatif-") as folder:
        sc_path, tr_path = Path(folder, "scenario.yaml"), Path(folder, "trace.csv")
        sc_path.write_text(yaml.safe_dump(scenario, sort_keys=False), encoding="utf-8")
        tr_path.write_text(trace_csv, encoding="utf-8")
        sc, jobs = load_scenario(str(sc_path)), load_trace(str(tr_path), until_s)
    end = until_s or 1.0
    tick = None
    if progress is not None:

        def tick(t: float) -> None:
            progress(min(1.0, t / end))

    started = time.process_time()
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
    result["cpu_s"] = round(time.process_time() - started, 3)
    return result
