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

GOLDEN_RANDOM: list[str] = [
    "3ba0626b2a7dc0f9",
    "73a3ad8cdf61bdec",
    "5248580866f7bbdd",
    "c876d9047003ba1f",
    "ffbe48a0091f7adf",
    "eacc1a3c8336d82f",
    "1d27693da304993e",
    "3568dbfcc861c83d",
    "4f96bcd1e9d9ae3e",
    "c6708cbf33cebb9a",
    "a224e11dac1c4936",
    "fcae81f8be3d5f2d",
    "2e9e62d75c08ba7b",
    "70bccaac5567e3e5",
    "77921a6bf6116d77",
    "18762c231e8dfe23",
    "35a985feacb324d4",
    "0391a9950cc2284b",
    "9752ff617ab7f9a3",
    "6ca7e25ae14db491",
    "e8534440d778c3a4",
    "ac083652b666b621",
    "2793204fc05232bd",
    "958533a822fce180",
    "5f482bdea9b3b445",
    "a0fbbc264634cf67",
    "d6c041616100b9ae",
    "f9e03841871376a0",
    "51fe020b2875790c",
    "c930984039773332",
    "da2236756a179c48",
    "e942f92cb9ae9650",
    "d30ef7d8d1dacee3",
    "fb16f984a68dbf18",
    "0260f3a6806f1e96",
    "ee74c2ba1b1d9164",
    "1f23e2f4f174d2c4",
    "667c9f5797638b6f",
    "d7d888b11e2ced9d",
    "ff960b1907628c7d",
    "b3bd8fbca9c35630",
    "1a42816fb8527d1d",
    "d378f0f8e59d6faf",
    "25dfc5ed46519733",
    # 44: reservation res1 of prog0/p0/s1 is open; its job p37 now preempts r02, an
    # unprotected stranger on the reserved node (passes.py, preempt.open_reserved).
    "69c42857dfe1fe4b",
    "a8607321066f9446",
    "aa601c59153fdb80",
    "67de301c7d6a59e3",
    "bd480411c23ec8ee",
    "421994c2677d1d8c",
    "494cac5ae5ece8d9",
    "aa8738c1f2f0cd47",
    "182ac47327e4a7ac",
    "68cc04a4f08bc9fe",
    "eebed9ae59228976",
    "813bf062f396c945",
    "1282935b7f9fd31e",
    "09b0eba4f0ed1390",
    "b398f7bb6597c509",
    "50ad7ea193e9564b",
    "79e0199803c1239d",
    "1905ac38b6e75f43",
    "87145ac20837ce0a",
    "13dfe7c550ca199a",
    "ac59ba95025c35a7",
    "0bd7c8a484f1237a",
    "7f94aa4eaeca448c",
    "db2cb9383bfac432",
    "713a14f5dd0ed668",
    # 69: a two-node victim freed c-09 and c-10; the job now lands on both instead of on
    # c-09 and an idle c-11 (a multi-node victim counts once: preempt.py _cheapest_groups).
    "42561df31299179e",
    "d66777bc6931875a",
    "33295315a1ee62ab",
    "d5cf2179c0bd1764",
    "5dd097c6e9d6f33f",
    "3b78564bcd93a9a2",
    "87fa9cadb3d5a332",
    "2888575869585a44",
    "95537e5bc1f19a3b",
    "8693d8811d6598be",
    "c75f2874d022bbe2",
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
