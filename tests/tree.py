"""A copy of the repository as a fresh clone would have it, for tests that run what a user runs."""

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def copy_of_the_tree(into: Path) -> Path:
    """The files of the working tree git does not ignore (a clone's, plus new ones not yet
    committed), so nothing is built into or left in the working tree itself. Untracked
    symlinks (a local ``.venv`` link, say) are not followed."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        source = ROOT / rel
        if source.is_file() and not source.is_symlink():
            (into / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / rel)
    return into
