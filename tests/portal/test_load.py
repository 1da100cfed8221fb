"""A short version of scripts/load-demo.py in CI (issue 16.4): the demo, as `make demo` runs it
(rundemo on SQLite and the embedded broker), under concurrent submitters and a little fuzzing.
No 5xx, the worker alive, the queue still moving afterwards. The full run is the script."""

import importlib.util
import json
import shutil
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.portal.livedemo import demo_env, running_demo, seed, wait_for

pytestmark = [pytest.mark.load, pytest.mark.celery]
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "load-demo.py"


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
    """scripts/load-demo.py, short, against ``url``: not one 5xx (not a 500, and not the
    locked-database 503 either, a backstop), no dropped connection, and the queue moved."""
    args = ["--url", url, "--submitters", "8", "--seconds", "15", "--settle", "60"]
    if shutil.which("schemathesis", path=str(Path(sys.executable).parent)):
        args += ["--fuzz-examples", "2"]
    out = tmp_path / "load.json"
    code = _load_script().main([*args, "--json", str(out)])
    report = json.loads(out.read_text())
    load = report["load"]
    assert load["server_errors"] == 0, load["server_error_samples"]
    assert load["transport_errors"] == 0, load["transport_error_samples"]
    assert load["submitted"] > 0
    assert report["after"]["picked_up"] == report["after"]["sampled"]  # the queue moved
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
