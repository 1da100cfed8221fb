"""Generated scenarios through the simulator and through the live loop: the same decisions.

Hypothesis draws small organisations and traces: one cluster, or two of different GPU types
(4 nodes of 8 GPUs at most in all), two programs with up to two projects each and random
grants (parents cover their children, as the portal requires), and up to 10 jobs of random
size, submit time, duration, minimum runtime, resumability, user and project (or none:
unfunded work; funded work runs unfunded once its budget cannot cover it). ``sim_live.py``
drives both sides; every start (nodes and funding), preemption and finish must agree, at the
same second.

Exact times, not a tolerance: every input lies on the 360 s pass grid, so every event of
either side happens at a pass time, and the simulator's claim is precisely that the passes it
skips are passes in which the live loop would change nothing. The run is derandomized (the
same examples every time); ``ALLOT_DIFF_EXAMPLES`` sets how many, ``ALLOT_DIFF_RANDOM=1``
explores new ones.
"""

from __future__ import annotations

import os
import shutil

import pytest
from django.db import transaction
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from scheduling.engine.sim.scenario import ClusterSpec

from .sim_live import HOUR, STEP, Case, LiveLoop, describe, job, make_run_pass, sim_events

EXAMPLES = int(os.environ.get("ALLOT_DIFF_EXAMPLES", 30))
HORIZON = 3 * HOUR
FACTORS = {"H100": 1.0, "B200": 2.0}
USERS = ["alice", "bob"]


@st.composite
def cases(draw) -> Case:
    """A small scenario on the pass grid (see the module docstring)."""
    first = draw(st.integers(1, 4))
    clusters = [ClusterSpec("jupiter", "H100", first, 8)]
    if first < 4 and draw(st.booleans()):
        clusters.append(ClusterSpec("saturn", "B200", draw(st.integers(1, 4 - first)), 8))
    budgets, leaves = [], []
    for top in ["p", "q"][: draw(st.integers(1, 2))]:
        hours = draw(st.sampled_from([0, 2, 5, 10, 20, 40, 80]))
        budgets.append((top, hours))
        kids = draw(st.integers(0, 2))
        if not kids:
            leaves.append(top)
        left = hours
        for kid in ["a", "b"][:kids]:
            grant = draw(st.integers(0, left))
            left -= grant
            budgets.append((f"{top}/{kid}", grant))
            leaves.append(f"{top}/{kid}")
    # each program's work runs on one cluster: see "budget_contended_across_clusters"
    home = {top: draw(st.sampled_from(clusters)) for top, _ in budgets if "/" not in top}
    jobs = []
    for n in range(draw(st.integers(3, 10))):
        project = draw(st.sampled_from(leaves + [""]))
        cluster = home[project.split("/")[0]] if project else draw(st.sampled_from(clusters))
        sizes = [1, 2, 4, 8] + ([16] if cluster.nodes >= 2 else [])
        spec = job(
            f"j{n}",
            STEP * draw(st.integers(0, 10)),
            project,
            draw(st.sampled_from(sizes)),
            STEP * draw(st.integers(1, 15)),
            min_runtime=draw(st.sampled_from([60, STEP, 3 * STEP, 1800, HOUR])),
            resumable=draw(st.booleans()),
            cluster=cluster.name,
            user=draw(st.sampled_from(USERS)),
        )
        jobs.append(spec)
    return Case(
        clusters=tuple(clusters),
        gpu_types={c.gpu_type: FACTORS[c.gpu_type] for c in clusters},
        budgets=tuple(budgets),
        jobs=tuple(jobs),
        horizon_s=HORIZON,
    )


@pytest.fixture
def run_pass(django_capture_on_commit_callbacks, monkeypatch):
    return make_run_pass(django_capture_on_commit_callbacks, monkeypatch)


def live_and_sim(case: Case, run_pass) -> tuple[list, list]:
    live = LiveLoop(case, run_pass)
    try:
        with transaction.atomic():  # a fresh organisation for every example
            expected = live.run()
            transaction.set_rollback(True)
    finally:
        shutil.rmtree(live.tmp, ignore_errors=True)
    return expected, sim_events(case, live.ids)


@pytest.mark.django_db
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("ALLOT_DIFF_RANDOM") != "1",
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=cases())
def test_generated_scenarios_get_the_same_decisions_in_the_simulator_and_the_live_loop(
    case, run_pass
):
    note(describe(case))
    expected, simulated = live_and_sim(case, run_pass)
    for kind in {e[2] + (" unfunded" if e[4] == "false" else "") for e in expected}:
        event(kind)  # --hypothesis-show-statistics: how many examples preempt, run unfunded
    assert simulated == expected, show(expected, simulated)


# Divergences the generated test found, minimised by hand: each failed before its fix.
FOUND: dict[str, Case] = {
    # p/a's balance runs out at 1800 s while p1 runs past its protection: the live loop
    # stops charging it there and its next pass makes it unfunded, so q2 (whose program is
    # over its share and may not preempt p's funded work) preempts it at 1800. The simulator
    # passed only at the next event and left q2 waiting until q1 finished (fixed:
    # sim/floor.py).
    "budget_runs_out": Case(
        clusters=(ClusterSpec("jupiter", "H100", 1, 8),),
        gpu_types={"H100": 1.0},
        budgets=(("p", 20), ("p/a", 2), ("p/b", 18), ("q", 10)),
        jobs=(
            job("q1", 0, "q", 4, 2 * HOUR, min_runtime=60),
            job("p1", 0, "p/a", 4, 2 * HOUR, min_runtime=60),
            job("q2", STEP, "q", 4, HOUR, min_runtime=60),
        ),
        horizon_s=HORIZON,
    ),
    # At 3210 s q's balance falls below j6's lien (4 GPUs x 300 s): j6 can no longer be funded
    # and stops holding the node, so at the live loop's next pass (3240) j4 (q, 1 GPU, whose
    # lien still fits) starts funded and preempts unfunded j8. No event happens there: the
    # simulator waited until 3600 and started j4 unfunded (fixed: sim/floor.py, liens).
    "lien_no_longer_covered": Case(
        clusters=(ClusterSpec("jupiter", "H100", 1, 8),),
        gpu_types={"H100": 1.0},
        budgets=(("p", 2), ("q", 2)),
        jobs=(
            job("j0", 1800, "q", 4, 3240, min_runtime=60, user="alice"),
            job("j1", 0, "p", 4, 1080, min_runtime=3600, resumable=False, user="alice"),
            job("j2", 0, "p", 4, 1440, min_runtime=3600, user="alice"),
            job("j3", 720, "p", 1, 2880, min_runtime=1800, resumable=False, user="alice"),
            job("j4", 2520, "q", 1, 5040, min_runtime=60, resumable=False, user="alice"),
            job("j5", 0, "q", 1, 360, min_runtime=60, user="bob"),
            job("j6", 1800, "q", 4, 720, min_runtime=60, resumable=False, user="bob"),
            job("j7", 2520, "p", 1, 5400, min_runtime=60, resumable=False, user="alice"),
            job("j8", 1800, "p", 2, 1800, min_runtime=3600, user="bob"),
        ),
        horizon_s=HORIZON,
    ),
    # The one divergence left, and why: the live loop passes cluster by cluster (each pass
    # commits its liens before the next cluster's pass reads the balances), the simulator
    # passes all clusters at once. When two clusters' jobs contend for one balance at the same
    # pass, the live loop funds the job of whichever cluster passes first; the simulator funds
    # them in the fair-share order the policy states (rank, user usage, submit time, id).
    # Here b comes first in that order (same project, user and submit time, lower id), so the
    # simulator funds b and starts a unfunded; the live loop passes jupiter first and funds a.
    # In production the clusters' passes run in whatever order the workers take them, so no
    # replay can predict that; a live pass that decided on every cluster's queue would agree.
    "budget_contended_across_clusters": Case(
        clusters=(ClusterSpec("jupiter", "H100", 1, 8), ClusterSpec("saturn", "B200", 1, 8)),
        gpu_types=dict(FACTORS),
        budgets=(("p", 2),),
        jobs=(
            job("b", 0, "p", 1, HOUR, min_runtime=1800, cluster="saturn"),
            job("a", 0, "p", 4, HOUR, min_runtime=1800, cluster="jupiter"),
        ),
        horizon_s=HORIZON,
    ),
}
KNOWN_DIVERGENCES = {"budget_contended_across_clusters"}


def show(expected: list, simulated: list) -> str:
    """Both sides' decisions side by side, for a failing assertion."""
    rows = sorted(set(expected) | set(simulated))
    mark = {True: "live ", False: "     "}
    return "\n".join(
        mark[r in expected] + ("sim  " if r in simulated else "     ") + repr(r) for r in rows
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason="passes per cluster"))
        if name in KNOWN_DIVERGENCES
        else name
        for name in sorted(FOUND)
    ],
)
def test_found_scenarios_get_the_same_decisions(name, run_pass):
    expected, simulated = live_and_sim(FOUND[name], run_pass)
    assert simulated == expected, show(expected, simulated)
