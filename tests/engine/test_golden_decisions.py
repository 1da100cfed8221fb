"""The engine's decisions, pinned: a speed-up must not change a single output.

The digests below were computed by the engine before its performance work (and updated only
for the deliberate rule changes named next to them). Each digest covers every field of the
Decisions (starts, preemptions and their sentences, held nodes, every pending reason,
position and estimate, every explanation, drain times), so an optimisation that changes any
of it fails here. Spot values make a failure readable before one digs into the digest.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from scheduling.engine import schedule
from scheduling.engine.bench import synthetic_snapshot
from scheduling.engine.model import Reservation
from scheduling.engine.sim import simulate
from scheduling.engine.sim.output import to_json
from scheduling.engine.sim.scenario import load_scenario, load_trace
from tests.engine.golden import digest, random_snapshot

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SEEDS = 80


def _policy(name):
    return lambda snap: replace(snap, policy=replace(snap.policy, name=name))


def _busy(snap):
    """The bench snapshot with drains, an approved reservation and an interactive lane."""
    nodes = tuple(replace(n, drained=True) if i % 97 == 5 else n for i, n in enumerate(snap.nodes))
    pending = tuple(
        replace(j, kind="interactive") if i % 41 == 0 else j for i, j in enumerate(snap.pending)
    )
    res = (
        Reservation("r1", "main", 32, snap.now_s + 1800, snap.now_s + 86400, "vision/proj-03"),
        Reservation("r2", "main", 16, snap.now_s - 60, snap.now_s + 3600, "language/proj-10"),
    )
    policy = replace(snap.policy, interactive_pool_gpus={"main": 16}, interactive_per_user=2)
    return replace(snap, nodes=nodes, pending=pending, reservations=res, policy=policy)


BENCH_CASES = {
    "1k": lambda: synthetic_snapshot(1000, 400, 64),
    "10k": lambda: synthetic_snapshot(10_000, 4000, 512),
    "10k-priority": lambda: _policy("priority")(synthetic_snapshot(10_000, 4000, 512)),
    "10k-fifo": lambda: _policy("fifo")(synthetic_snapshot(10_000, 4000, 512)),
    "3k-seed-11": lambda: synthetic_snapshot(3000, 1500, 200, seed=11),
    "3k-busy": lambda: _busy(synthetic_snapshot(3000, 1500, 200, seed=5)),
    "2k-no-preemption": lambda: replace(
        synthetic_snapshot(2000, 600, 96, seed=3),
        policy=replace(synthetic_snapshot(1, 1, 1).policy, preemption=False),
    ),
}

GOLDEN_BENCH = {
    "1k": "fc6bf26ecb6bb7e2",
    "10k": "12bd68a54c77f2b2",
    "10k-priority": "84f1f41652fc4ce3",
    "10k-fifo": "fc7ada84b443252d",
    "3k-seed-11": "67b8f68a8e9cc641",
    # Reservation r2 of language/proj-10 is open: its jobs now preempt unprotected
    # strangers on gpu-0197/0198, and the pass no longer stops early while they could.
    "3k-busy": "74858b99a43210d7",
    "2k-no-preemption": "430d80cd0f5e663e",
}

# Changed by the budget floor (passes.budget_floor): seeds whose snapshot has a funded run
# past its protection on a spent budget now report it defunded; without that step every
# digest is the one pinned before. Changed again by the exception rule (state._protection): an
# approved extended protection protects for its hours at every start, not min(min runtime, it).
GOLDEN_RANDOM: list[str] = [
    "32d2c8aca61d47cc",
    "b56814d084bfb524",
    "bbc25ca1bd16c725",
    "c876d9047003ba1f",
    "c527cec7ef0b8faa",
    "eacc1a3c8336d82f",
    "faa121c1d31c22de",
    "ea6cb4848216df7e",
    "c943c56465fbb9ba",
    "d0b3102b7168506f",
    "5185939f51960c58",
    "fcae81f8be3d5f2d",
    "dded1e6d46ab3046",
    "022c9dc1fb949a47",
    "b4a74530bb81713a",
    "18762c231e8dfe23",
    "56f6305771c07b9c",
    "02e2e120a137d2fe",
    "41b41117c4bcc4ba",
    "93228d5256f1943c",
    "b62bb5b7205e0211",
    "55ce63168f5ab562",
    "2793204fc05232bd",
    "e69b5c504b0f1a5a",
    "3aa8e9c632a869db",
    "a0fbbc264634cf67",
    "802836ef76c607bb",
    "53e5fb2a5bf79c40",
    "336d1de15b38034b",
    "cd4823f8797427e7",
    "da2236756a179c48",
    "e942f92cb9ae9650",
    "e0afdc2b79e04c9f",
    "12670d9d9ff5f696",
    "ea04add17a98272d",
    "b3dfcb77e76cdc6e",
    "fe3f693462273890",
    "f027b06ea6d48058",
    "d7d888b11e2ced9d",
    "ff960b1907628c7d",
    "b3bd8fbca9c35630",
    "ae479a5da3db5933",
    "2d40e638afd7a674",
    "b4291ea0249454dc",
    "53206775fa9ca4d0",
    "815cf743a277f5ee",
    "58be0a41774d4d81",
    "67de301c7d6a59e3",
    "5efebf1099bf5f5d",
    "e97ecae7d5f920d2",
    "494cac5ae5ece8d9",
    "8448397f3f8ac6df",
    "182ac47327e4a7ac",
    "68cc04a4f08bc9fe",
    "1ab7d0e277164b51",
    "7152e7c67b206548",
    "10809a9392d7b28c",
    "335160ff69fe3e7b",
    "b398f7bb6597c509",
    "67b805d9ee01ea3f",
    "79e0199803c1239d",
    "5c225351b05a93be",
    "87145ac20837ce0a",
    "731201bb6e20ba4d",
    "7f13111f7bb44cbe",
    "20f611542c268dc8",
    "45aea15579eb59e9",
    "432731cd2af1fb2b",
    "46de0377854e4bee",
    "39fa04af36ba1094",
    "d5dcf833183b3007",
    "b9225644d93559d5",
    "7e4c5793a8e6892b",
    "a43e68d73d0ceb8c",
    "4a11d4c44f7afe4c",
    "7573198f50073cb5",
    "ead4c97edeacdc8a",
    "95537e5bc1f19a3b",
    "e9b99b407ec55baf",
    "e782b55ed6c7b405",
]

# Changed once, by the multi-node-victim rule (preempt.py _cheapest_groups); the replay with
# that rule switched off still gives the digest pinned before the performance work.
# Changed again by the simulator, not the engine: it now passes again one interval after a
# pass that changed something and when a standing crosses 1 while fundable work waits (as
# the live loop would; sim/standing.py), and reports wasted and fragmented GPU-hours. With
# those extra passes switched off and the new keys left out, the replay still gives
# a3405aae3bea8927, the digest pinned before.
GOLDEN_SIMULATION = "f391e3e6f4685c6d"


def simulation_digest() -> str:
    import hashlib
    import json

    sc = load_scenario(str(EXAMPLES / "small.yaml"))
    jobs = load_trace(str(EXAMPLES / "small.csv"))
    out = to_json(simulate(sc, jobs, "fairshare", until_s=3 * 86400.0))
    text = json.dumps(out, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def test_the_bench_snapshots_get_the_pinned_decisions():
    got = {name: digest(schedule(build())) for name, build in BENCH_CASES.items()}
    assert got == GOLDEN_BENCH


def test_the_ten_thousand_job_pass_keeps_its_spot_values():
    d = schedule(BENCH_CASES["10k"]())
    assert (len(d.starts), len(d.preemptions), len(d.reservations)) == SPOT_10K["counts"]
    assert [(s.job_id, s.nodes) for s in d.starts[:3]] == SPOT_10K["first_starts"]
    assert [p.job_id for p in d.preemptions[:5]] == SPOT_10K["first_preempted"]
    assert {
        k: (v.code, v.position, v.estimated_start_s)
        for k, v in d.pending.items()
        if k in SPOT_10K["pending"]
    } == SPOT_10K["pending"]


def test_random_snapshots_get_the_pinned_decisions():
    got = [digest(schedule(random_snapshot(seed))) for seed in range(SEEDS)]
    changed = [seed for seed, (a, b) in enumerate(zip(got, GOLDEN_RANDOM, strict=True)) if a != b]
    assert changed == []


def test_the_example_simulation_replays_identically():
    assert simulation_digest() == GOLDEN_SIMULATION


SPOT_10K: dict = {
    "counts": (17, 22, 0),
    "first_preempted": ["r1", "r234", "r808", "r810", "r814"],
    "first_starts": [
        ("p1024", (("gpu-0000", 1),)),
        ("p617", (("gpu-0041", 4),)),
        ("p1661", (("gpu-0041", 1),)),
    ],
    "pending": {
        "p0": ("Priority", 3224, 1053011.2757303726),
        "p1": ("Priority", 938, 1014595.3901534816),
        "p17": ("Priority", 1113, 1018000.0),
        "p4242": ("Priority", 7082, 1119365.3490363746),
        "p9999": ("Priority", 4797, 1079118.0495032044),
    },
}
