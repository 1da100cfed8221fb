"""``pip install .`` of the server alone gives a web, workers and beat that start: in a fresh
virtualenv holding nothing else, every module they load imports (Django set up with the
project's settings, the Celery app with its tasks found by autodiscovery, every module of the
server's packages). A package the code imports but only another distribution (the ``allot``
command's, cli/) declares fails here, not on a production worker.

Network-bound: pip fetches the dependencies from PyPI (through pip's own cache), a minute or
two. CI runs it; a machine without PyPI skips it.
"""

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.conftest import service_missing, tcp_open
from tests.tree import copy_of_the_tree

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["core", "portal", "budgets", "scheduling", "exceptions", "whatif"]

# Run by the virtualenv's interpreter from an empty folder: only what pip installed imports.
PROBE = """
import importlib, os, pkgutil, sys
import django
django.setup()
failed = []
for name in sys.argv[1:]:
    package = importlib.import_module(name)
    assert os.path.realpath(package.__file__).startswith(os.path.realpath(sys.prefix)), (
        f"{name} imported from {package.__file__}, not from the install")
    for module in pkgutil.walk_packages(package.__path__, name + "."):
        try:
            importlib.import_module(module.name)
        except Exception as exc:
            failed.append(f"{module.name}: {type(exc).__name__}: {exc}")
import portal.wsgi
from django.conf import settings
from portal.celery import app
app.loader.import_default_modules()  # autodiscovery, as a worker and beat do at start
for entry in settings.CELERY_BEAT_SCHEDULE.values():
    if entry["task"] not in app.tasks:
        failed.append(f"beat's {entry['task']} is not a registered task")
for name in ("scheduling.tasks.schedule_all", "exceptions.tasks.housekeeping"):
    if name not in app.tasks:
        failed.append(f"{name} is not a registered task")
print("\\n".join(failed) or "all imported")
sys.exit(1 if failed else 0)
"""


@pytest.mark.install
def test_the_server_installed_alone_loads_everything_the_web_workers_and_beat_import(tmp_path):
    if not tcp_open("pypi.org", 443, timeout=5):
        service_missing("PyPI (pypi.org:443) is not reachable")
    tree = copy_of_the_tree(tmp_path / "tree")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    drop = {"PYTHONPATH", "DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV"}
    environ = {k: v for k, v in os.environ.items() if k not in drop}
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(tree)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    environ |= {
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "SECRET_KEY": "k" * 60,
        "DEBUG": "0",
        "ALLOT_VAR_DIR": str(tmp_path / "var"),
    }
    for name in ("DATABASE_URL", "REDIS_URL"):
        environ.pop(name, None)
    probe = subprocess.run(
        [str(python), "-c", PROBE, *PACKAGES],
        cwd=empty,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert probe.returncode == 0, probe.stdout[-5000:] + probe.stderr[-3000:]
    assert sys.prefix not in probe.stdout
