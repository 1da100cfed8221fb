"""scripts/load-demo.py in CI: the demo, as `make demo` runs it (rundemo on SQLite
and the embedded broker), under schemathesis as researcher and leader, then 20 concurrent
submitters for a minute. No 5xx, the worker alive, the queue still moving afterwards.

``ALLOT_LOAD_SUBMITTERS`` (20), ``ALLOT_LOAD_SECONDS`` (60) and ``ALLOT_LOAD_FUZZ_EXAMPLES`` (3)
size the run; the defaults are what CI runs."""

import importlib.util
import json
import os
import shutil
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.portal.livedemo import demo_env, running_demo, seed, wait_for

pytestmark = [pytest.mark.load, pytest.mark.celery]
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "load-demo.py"
SUBMITTERS = os.environ.get("ALLOT_LOAD_SUBMITTERS", "20")
SECONDS = os.environ.get("ALLOT_LOAD_SECONDS", "60")
FUZZ_EXAMPLES = os.environ.get("ALLOT_LOAD_FUZZ_EXAMPLES", "3")


def _answers(url: str) -> bool:
    try:
        return urllib.request.urlopen(url, timeout=5).status == 200
    except OSError:
        return False


def _load_script():
    spec = importlib.util.spec_from_file_location("load_demo", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_and_check(url: str, tmp_path) -> dict:
    """scripts/load-demo.py against ``url``: not one 5xx (not a 500, and not the locked-database
    503 either, a backstop), no dropped connection, and the queue moved, also for a job
    submitted after the load."""
    args = ["--url", url, "--submitters", SUBMITTERS, "--seconds", SECONDS, "--settle", "90"]
    if shutil.which("schemathesis", path=str(Path(sys.executable).parent)):
        args += ["--fuzz-examples", FUZZ_EXAMPLES]
    elif os.environ.get("ALLOT_REQUIRE_SERVICES", "") in {"1", "true", "yes"}:
        pytest.fail("required service missing: schemathesis (the fuzzer)", pytrace=False)
    out = tmp_path / "load.json"
    code = _load_script().main([*args, "--json", str(out)])
    report = json.loads(out.read_text())
    load = report["load"]
    assert load["server_errors"] == 0, load["server_error_samples"]
    assert load["transport_errors"] == 0, load["transport_error_samples"]
    assert load["submitted"] > 0
    assert report["after"]["picked_up"] == report["after"]["sampled"]  # the queue moved
    assert report["after"]["probe_picked_up"]  # and still moves after the load
    assert report["after"]["healthz"] == 200
    assert code == 0, report  # and the fuzzer found no 5xx either
    return report


def test_the_demo_under_submitters_and_a_fuzzer_serves_no_5xx_and_keeps_moving(tmp_path):
    env = demo_env(tmp_path)
    seed(env)
    with running_demo(env) as demo:
        wait_for(lambda: _answers(f"{demo.url}/login/"), 90)  # runserver takes a moment
        load_and_check(demo.url, tmp_path)
        assert not [line for line in demo.lines if " died (" in line]  # no child crashed
        assert not [line for line in demo.lines if "database is locked" in line]
        assert demo.process.poll() is None
