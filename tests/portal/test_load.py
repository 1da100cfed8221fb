"""A short version of scripts/load-demo.py in CI (issue 16.4): the demo, as `make demo` runs it
(rundemo on SQLite and the embedded broker), under concurrent submitters and a little fuzzing.
No 5xx, the worker alive, the queue still moving afterwards. The full run is the script."""

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from tests.portal.test_rundemo import _free_port, _manage, _wait_for

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


def test_the_demo_under_submitters_and_a_fuzzer_serves_no_5xx_and_keeps_moving(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"}}  # fmt: skip
    env |= {
        "ALLOT_VAR_DIR": str(tmp_path / "var"),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "ALLOT_PASS_INTERVAL_S": "2",
        "PYTHONUNBUFFERED": "1",
    }
    _manage(env, "migrate", "--noinput", capture_output=True)
    _manage(env, "seed_demo", capture_output=True)
    port = _free_port()
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "rundemo", "--port", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(demo.stdout), daemon=True).start()
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_for(lambda: _answers(f"{base}/login/"), 90)  # runserver takes a moment
        args = ["--url", base, "--submitters", "8", "--seconds", "15", "--settle", "60"]
        if shutil.which("schemathesis") or shutil.which("st"):
            args += ["--fuzz-examples", "2"]
        out = tmp_path / "load.json"
        code = _load_script().main([*args, "--json", str(out)])
        assert code == 0, out.read_text()
        assert not [line for line in lines if " died (" in line]  # no child crashed
        assert demo.poll() is None
    finally:
        demo.send_signal(signal.SIGTERM)
        demo.wait(timeout=30)
