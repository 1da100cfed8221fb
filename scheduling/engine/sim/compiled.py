"""The engine and the simulator compiled with mypyc: the same source, about 1.5 times faster.

``python -m scheduling.engine.sim.compiled build [--into DIR]`` (``make engine``) compiles
``scheduling/engine`` (the engine and the simulator, not the loaders and the tools) into
``build/engine`` with mypyc, the compiler of the mypy project: plain annotated Python turned
into C extension modules, with no second language. ``check`` says whether a build is there
and was made from the source as it is now (exit status 1 if not).

No process imports the compiled copy by itself: the pure-Python engine stays the one of the
web, the live loop and the tests. ``manage.py simulate`` (and so the what-if replays it runs
in the background) runs again in place on a fresh build when there is one (``--engine pure``
or ``ALLOT_ENGINE=pure`` not to); the replay tools take it on request (``compare
--compiled``, ``replay_bench --compiled``). Each does so in a fresh interpreter whose
``PYTHONPATH`` starts with the build (``env``, ``reexec``): its ``scheduling`` package
resolves ``scheduling.engine`` from the build and everything else from the source tree. A
build older than the source is refused, never run (``require``). The compiled engine must
decide exactly what the pure one decides: ``tests/engine/test_compiled_engine.py`` replays
scenarios both ways and compares every figure.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
ENGINE = ROOT / "scheduling" / "engine"
# where ``make engine`` builds and the tools look (``ALLOT_ENGINE_BUILD`` moves it)
DEFAULT = Path(os.environ.get("ALLOT_ENGINE_BUILD") or ROOT / "build" / "engine")
# The tools and loaders stay interpreted: they run once per replay, and the scenario loader's
# YAML subclasses do not compile.
INTERPRETED = {
    "__init__",
    "bench",
    "compare",
    "scenario",
    "replay_bench",
    "replay_check",
    "compiled",
}

_STUB = '''"""The compiled engine's ``scheduling``: ``scheduling.engine`` from this build, the rest
from the source tree it was built from."""
__path__.append({source!r})
'''

_SETUP = (
    "import sys; from setuptools import setup; from mypyc.build import mypycify; "
    "setup(name='allot-engine', ext_modules=mypycify(sys.argv[1:], opt_level='3'), "
    "script_args=['build_ext', '--inplace'])"
)


class BuildError(RuntimeError):
    pass


def modules(root: Path = ENGINE) -> list[Path]:
    """The engine's modules that are compiled, relative to ``root``."""
    found = sorted(p.relative_to(root) for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    return [p for p in found if p.stem not in INTERPRETED]


def digest(root: Path = ENGINE) -> str:
    """What a build is made from: every source file of the engine, and the interpreter."""
    h = hashlib.sha256(sys.version.encode())
    for p in sorted(root.rglob("*.py")):
        if "__pycache__" not in p.parts:
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def fresh(into: Path = DEFAULT) -> bool:
    stamp = into / "STAMP"
    return stamp.is_file() and stamp.read_text().strip() == digest()


def require(into: Path = DEFAULT) -> Path:
    """The build's import root, or ``BuildError`` saying how to make it."""
    if not (into / "STAMP").is_file():
        raise BuildError(f"no compiled engine in {into}: run `make engine` first")
    if not fresh(into):
        raise BuildError(
            f"the compiled engine in {into} was built from another source: run `make engine` again"
        )
    return into / "src"


def env(into: Path = DEFAULT) -> dict[str, str]:
    """The environment of an interpreter that imports the compiled engine."""
    src = str(require(into))
    return dict(os.environ, PYTHONPATH=os.pathsep.join([src, str(ROOT)]))


def running() -> bool:
    """Whether this interpreter imported the compiled engine."""
    from scheduling.engine import passes

    return not str(passes.__file__).endswith(".py")


def reexec(module: str, argv: list[str], into: Path = DEFAULT) -> None:
    """Run ``python -m module argv`` again in place of this process, on the compiled engine
    (``-P``: the working folder is not put ahead of the build). Returns only when this
    process already runs it; raises ``BuildError`` when there is no fresh build, or when the
    new process still imported the pure engine."""
    if running():
        return
    if os.environ.get("ALLOT_COMPILED_REEXEC"):
        raise BuildError("the compiled engine did not load (pure-Python modules came first)")
    environ = dict(env(into), ALLOT_COMPILED_REEXEC="1")
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, "-P", "-m", module, *argv], environ)


def build(into: Path = DEFAULT, quiet: bool = True) -> Path:
    """Compile the engine into ``into`` (replacing what was there); its import root."""
    try:
        import mypyc  # noqa: F401  (comes with mypy)
        import setuptools  # noqa: F401
    except ImportError as e:
        raise BuildError(f"mypyc needs mypy and setuptools ({e}): pip install -e '.[dev]'") from e
    if shutil.which(os.environ.get("CC", "cc")) is None and shutil.which("gcc") is None:
        raise BuildError("mypyc needs a C compiler (gcc) and the Python headers")
    shutil.rmtree(into, ignore_errors=True)
    src = into / "src"
    made = digest()
    shutil.copytree(
        ENGINE, src / "scheduling" / "engine", ignore=shutil.ignore_patterns("__pycache__")
    )
    (src / "scheduling" / "__init__.py").write_text(_STUB.format(source=str(ROOT / "scheduling")))
    # the engine is checked by the project's own lint and tests, not here: mypyc only needs
    # the annotations, and checks the types it relies on at run time
    (into / "mypy.ini").write_text("[mypy]\nignore_missing_imports = True\nignore_errors = True\n")
    names = [str(Path("scheduling") / "engine" / p) for p in modules()]
    args = [sys.executable, "-c", _SETUP, f"--config-file={into / 'mypy.ini'}", *names]
    done = subprocess.run(args, cwd=src, capture_output=quiet, text=True)
    if done.returncode != 0:
        raise BuildError(f"mypyc failed:\n{(done.stderr or '')[-3000:]}")
    (into / "STAMP").write_text(made + "\n")
    return src


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["build", "check"])
    ap.add_argument("--into", default=str(DEFAULT), help="the build folder (build/engine)")
    args = ap.parse_args(argv)
    into = Path(args.into).resolve()
    try:
        if args.command == "build":
            build(into, quiet=False)
            print(f"compiled {len(modules())} modules into {into}")
        else:
            require(into)
            print(f"{into}: up to date")
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
