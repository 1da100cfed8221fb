import json

from scheduling.engine.bench import main, synthetic_snapshot


def test_the_benchmark_prints_one_json_line_with_the_median(capsys):
    assert (
        main(["--pending", "300", "--running", "200", "--nodes", "32", "--repeat", "3", "--json"])
        == 0
    )
    line = capsys.readouterr().out.strip()
    data = json.loads(line)
    assert "\n" not in line and data["median_ms"] > 0 and data["pending"] == 300


def test_the_synthetic_snapshot_is_consistent():
    snap = synthetic_snapshot(100, 400, 64)
    used: dict[str, int] = {}
    for r in snap.running:
        for n, g in r.nodes:
            used[n] = used.get(n, 0) + g
    assert len(snap.running) == 400 and max(used.values()) <= 8
    assert len({b.path for b in snap.budgets}) == 3 + 150
    assert len({j.user for j in snap.pending} | {r.user for r in snap.running}) > 100


def test_the_baseline_flag_reports_a_reference_time_and_the_ratio_to_it(capsys):
    argv = ["--pending", "200", "--running", "100", "--nodes", "16", "--repeat", "3", "--json"]
    assert main([*argv, "--baseline"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["baseline_ms"] > 0
    assert abs(data["ratio"] - data["median_ms"] / data["baseline_ms"]) < 0.01
    assert main(argv) == 0
    assert "ratio" not in json.loads(capsys.readouterr().out)
