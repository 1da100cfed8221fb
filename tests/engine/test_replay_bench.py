"""The replay benchmark's instruction counts (``replay_bench --instructions``)."""

import json
import shutil
from pathlib import Path

import pytest

from scheduling.engine.sim import replay_bench
from tests.conftest import service_missing

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = str(ROOT / "examples" / "small.yaml")
TRACE = str(ROOT / "examples" / "small.csv")


@pytest.fixture
def valgrind():
    if shutil.which("valgrind") is None:
        service_missing("valgrind is not installed (Debian package valgrind)")


def test_the_count_is_of_the_replay_alone(valgrind):
    """Starting the interpreter and loading the scenario and the trace are taken out: a
    replay that stops at once counts next to nothing beside a day's replay (1.3 million
    against 840 million instructions here; the load alone is hundreds of millions)."""
    none = replay_bench.instructions(ROOT, SCENARIO, TRACE, "fairshare", 0.0, 0.0)
    day = replay_bench.instructions(ROOT, SCENARIO, TRACE, "fairshare", 0.0, 86400.0)
    assert day > 0 and abs(none) < day / 100


def test_the_same_engine_twice_counts_the_same(valgrind, capsys):
    argv = [SCENARIO, TRACE, "--until", "21600", "--repeat", "1", "--policies", "fifo"]
    assert replay_bench.main([*argv, "--baseline-src", str(ROOT), "--instructions", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["same_result"]
    assert row["current"]["instructions"] > 0 and row["baseline"]["instructions"] > 0
    assert row["ratio_instructions"] == pytest.approx(1.0, abs=0.02)


def test_without_valgrind_the_flag_is_refused_naming_it(monkeypatch, capsys):
    monkeypatch.setattr(replay_bench.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit):
        replay_bench.main([SCENARIO, TRACE, "--until", "3600", "--instructions"])
    assert "--instructions: valgrind is not installed" in capsys.readouterr().err
