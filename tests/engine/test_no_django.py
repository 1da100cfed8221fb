import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_engine_module_imports_without_django():
    code = (
        "import pkgutil, importlib, sys\n"
        "import scheduling.engine as e\n"
        "names = [m.name for m in pkgutil.walk_packages(e.__path__, 'scheduling.engine.')]\n"
        "for n in names: importlib.import_module(n)\n"
        "assert len(names) >= 10, names\n"
        "bad = [m for m in sys.modules if m == 'django' or m.startswith('django.')]\n"
        "assert not bad, bad\n"
        "print(len(names))\n"
    )
    # scheduling/__init__.py must not pull Django in either: import from a clean interpreter.
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) >= 10
