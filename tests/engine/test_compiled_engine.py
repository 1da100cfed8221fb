"""The compiled engine (``make engine``, ``scheduling/engine/sim/compiled.py``) decides exactly
what the pure-Python one decides, and a build older than the source is never run.

One build (about a minute of gcc) serves the module. mypy (with mypyc) is a dev dependency and
gcc is on every machine this runs on; without either the build fails and so does this test:
nothing here skips.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduling.engine.sim import compiled, replay_bench

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PHILLY = ROOT.parent / "shared" / "traces" / "philly-vc.csv"


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    into = tmp_path_factory.mktemp("engine")
    src = compiled.build(into)
    return into, src


def test_the_build_compiles_the_engine_and_stamps_its_source(build):
    into, src = build
    assert compiled.fresh(into)
    engine = src / "scheduling" / "engine"
    for rel in compiled.modules():
        stem = engine / rel.parent / rel.stem
        assert list(stem.parent.glob(f"{stem.name}.*.so")), rel
    assert "passes.py" in {p.name for p in compiled.modules()}
    assert not any(p.stem == "scenario" for p in compiled.modules())  # the loader stays plain


@pytest.mark.parametrize("policy", ["fairshare", "priority", "fifo"])
def test_the_example_replays_alike_compiled_and_pure(build, policy):
    _, src = build
    scenario, trace = str(EXAMPLES / "small.yaml"), str(EXAMPLES / "small.csv")
    pure = replay_bench.replay(ROOT, scenario, trace, policy, 0.0, 3 * 86400.0)
    fast = replay_bench.replay(src, scenario, trace, policy, 0.0, 3 * 86400.0)
    assert not pure["compiled"] and fast["compiled"]
    assert fast["digest"] == pure["digest"] and fast["passes"] == pure["passes"] > 0


def test_a_saturated_philly_day_replays_alike(build):
    """The benchmark slice's first day and a half under fair share: preemptions, holds, the
    repeat memo and the search budget all at work (digest of every figure of the result)."""
    _, src = build
    scenario, trace = str(EXAMPLES / "philly-bench.yaml"), str(PHILLY)
    pure = replay_bench.replay(ROOT, scenario, trace, "fairshare", 3456000.0, 129600.0)
    fast = replay_bench.replay(src, scenario, trace, "fairshare", 3456000.0, 129600.0)
    assert fast["compiled"] and fast["preemptions"] > 0
    assert fast["digest"] == pure["digest"]


def test_the_golden_decisions_hold_compiled(build):
    """The pinned decisions (every start, preemption, hold, pending reason, estimate and
    explanation of the golden snapshots), with the compiled engine imported first: pytest in
    a fresh interpreter run from the build, the test modules appended to its path."""
    _, src = build
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), str(ROOT)]))
    probe = "import scheduling.engine.passes as p; print(p.__file__)"
    where = subprocess.run(
        [sys.executable, "-c", probe], cwd=src, env=env, capture_output=True, text=True
    )
    assert where.stdout.strip().endswith(".so"), where.stderr
    test = str(ROOT / "tests" / "engine" / "test_golden_decisions.py")
    done = subprocess.run(
        [sys.executable, "-c", _PYTEST, test],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout


# pytest from the build folder: no rootdir conftest put ahead of the build on sys.path, and a
# check that the engine under test really is the compiled one
_PYTEST = """
import sys, pytest
import scheduling.engine.passes as p
assert p.__file__.endswith(".so"), p.__file__
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider",
                      "--import-mode=append", "--rootdir", sys.argv[1].rsplit("/tests/", 1)[0],
                      "-o", "addopts=", sys.argv[1]]))
"""


def test_compare_runs_the_policies_on_the_compiled_engine(build):
    """``compare --compiled`` runs again in place on the build, with the same figures."""
    into, _ = build
    args = [str(EXAMPLES / "small.yaml"), str(EXAMPLES / "small.csv"), "--until", "86400"]
    args += ["--workers", "1"]
    env = dict(os.environ, ALLOT_ENGINE_BUILD=str(into))
    env.pop("ALLOT_COMPILED_REEXEC", None)
    runs = {}
    for flag in ([], ["--compiled"]):
        done = subprocess.run(
            [sys.executable, "-m", "scheduling.engine.sim.compare", *args, *flag],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        runs[bool(flag)] = json.loads(done.stdout)
    for row in (*runs[False], *runs[True]):
        row.pop("wall_s"), row.pop("cpu_s"), row.pop("cpu_runs_s")
    assert [r["compiled"] for r in runs[True]] == [True] * 3
    assert [r.pop("compiled") for r in runs[False]] == [False] * 3
    for r in runs[True]:
        r.pop("compiled")
    assert runs[True] == runs[False]


def _simulate(build_dir: Path, out: Path, *flags: str) -> subprocess.CompletedProcess:
    """``manage.py simulate`` of the example as a user runs it, with ``build_dir`` as the
    build ``make engine`` made."""
    env = dict(os.environ, ALLOT_ENGINE_BUILD=str(build_dir))
    for name in ("ALLOT_COMPILED_REEXEC", "ALLOT_ENGINE", "PYTHONPATH"):
        env.pop(name, None)
    args = [str(EXAMPLES / "small.yaml"), str(EXAMPLES / "small.csv"), "--until", "86400"]
    args += ["--json", str(out / "out.json"), "--events", str(out / "events.csv"), *flags]
    out.mkdir()
    return subprocess.run(
        [sys.executable, "manage.py", "simulate", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_simulate_runs_on_the_build_by_itself_with_the_same_json(build, tmp_path):
    into, _ = build
    fast = _simulate(into, tmp_path / "auto")
    pure = _simulate(into, tmp_path / "pure", "--engine", "pure")
    assert fast.returncode == 0 and pure.returncode == 0, fast.stderr + pure.stderr
    assert "(compiled engine)" in fast.stdout and "(pure engine)" in pure.stdout
    for name in ("out.json", "events.csv"):
        assert (tmp_path / "auto" / name).read_bytes() == (tmp_path / "pure" / name).read_bytes()


def test_simulate_without_a_build_runs_pure_unless_compiled_is_required(tmp_path):
    auto = _simulate(tmp_path / "no-build", tmp_path / "auto")
    assert auto.returncode == 0, auto.stderr
    assert "(pure engine)" in auto.stdout
    required = _simulate(tmp_path / "no-build", tmp_path / "required", "--engine", "compiled")
    assert required.returncode == 1
    assert "make engine" in required.stderr and "Traceback" not in required.stderr


def test_a_stale_build_is_refused_naming_the_command(build, tmp_path, monkeypatch, capsys):
    into, _ = build
    with pytest.raises(compiled.BuildError, match="make engine"):
        compiled.require(tmp_path)  # nothing built there
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / "STAMP").write_text("0" * 64 + "\n")  # built from another source
    with pytest.raises(compiled.BuildError, match="built from another source"):
        compiled.require(stale)
    assert compiled.require(into) == into / "src"
    monkeypatch.setattr(compiled, "DEFAULT", stale)
    monkeypatch.setattr(compiled.require, "__defaults__", (stale,))
    with pytest.raises(SystemExit):
        replay_bench.main(
            [
                str(EXAMPLES / "small.yaml"),
                str(EXAMPLES / "small.csv"),
                "--until",
                "60",
                "--compiled",
            ]
        )
    assert "--compiled: the compiled engine" in capsys.readouterr().err
    assert compiled.main(["check", "--into", str(stale)]) == 1
    env = dict(os.environ, ALLOT_ENGINE_BUILD=str(stale))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scheduling.engine.sim.compare",
            str(EXAMPLES / "small.yaml"),
            str(EXAMPLES / "small.csv"),
            "--until",
            "3600",
            "--compiled",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "--compiled: the compiled engine" in done.stderr
