"""Every command a doc prints in a fenced block tagged ```sh runnable runs as printed.

Each block runs in a fresh copy of the repository (the files git does not ignore), in a plain
shell: ``bash -euo pipefail``, ``PATH`` with the project's virtualenv first, ``HOME`` an empty
folder, and none of ``DATABASE_URL``, ``REDIS_URL``, ``DEBUG``, ``SECRET_KEY`` or
``DJANGO_SETTINGS_MODULE`` — what a newcomer has on a fresh clone after ``make install``.

Blocks that serve forever (``make demo``), need a service or a real cluster, or are the test
command itself stay plain ```sh.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.tree import copy_of_the_tree

ROOT = Path(__file__).resolve().parents[2]
FENCE = "```sh runnable"
TIMEOUT_S = 240
# the blocks tagged when this test was written; more may come, fewer means a tag was lost
AT_LEAST = 7


@dataclass(frozen=True)
class Block:
    where: str  # path:line of the opening fence
    text: str


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def collect(paths: list[Path]) -> list[Block]:
    blocks = []
    for path in paths:
        lines = path.read_text(encoding="utf-8").splitlines()
        opened = None
        for number, line in enumerate(lines, 1):
            if opened is None and line == FENCE:
                opened, body = number, []
            elif opened is not None and line.strip() == "```":
                rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                blocks.append(Block(f"{rel}:{opened}", "\n".join(body) + "\n"))
                opened = None
            elif opened is not None:
                body.append(line)
        assert opened is None, f"{path}:{opened}: the runnable block is never closed"
    return blocks


def _venv_bin() -> Path:
    own = ROOT / ".venv" / "bin"
    return own if own.is_dir() else Path(sys.executable).parent


def run(block: Block, tmp_path: Path) -> subprocess.CompletedProcess:
    """The block in a fresh copy of the repository, in a plain shell."""
    tree = copy_of_the_tree(tmp_path / "clone")
    home = tmp_path / "home"
    home.mkdir()
    environ = {
        "PATH": os.pathsep.join([str(_venv_bin()), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TMPDIR": str(tmp_path),
    }
    try:
        return subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.text],
            cwd=tree,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout
        pytest.fail(f"{block.where}: still running after {TIMEOUT_S} s\n{out or ''}")


BLOCKS = collect(_docs())


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_the_block_runs_as_printed(block, tmp_path):
    done = run(block, tmp_path)
    assert done.returncode == 0, (
        f"{block.where} exited {done.returncode}:\n{block.text}\n--- output ---\n{done.stdout}"
    )


def test_the_docs_hold_runnable_blocks():
    assert len(BLOCKS) >= AT_LEAST, [b.where for b in BLOCKS]


def test_every_runnable_tag_is_spelt_as_the_harness_reads_it():
    """A fence such as ```bash runnable or ```sh  runnable would be skipped in silence."""
    misspelt = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in _docs()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if line.startswith("```") and "runnable" in line and line != FENCE
    ]
    assert not misspelt


@pytest.mark.parametrize(
    "text",
    [
        "no-such-command-in-allot --help\n",
        "python -c 'import sys; sys.exit(3)'\necho still here\n",
        "false | cat\n",
        'echo "$DATABASE_URL$SECRET_KEY$DEBUG"\n',
    ],
    ids=["unknown command", "a failing line before a good one", "a failing pipe", "unset"],
)
def test_a_block_with_a_wrong_command_fails(text, tmp_path):
    done = run(Block("example.md:1", text), tmp_path)
    assert done.returncode != 0, done.stdout


def test_blocks_are_read_from_their_fence_to_its_close(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "text\n```sh\nnot this\n```\n```sh runnable\necho one\necho two\n```\n"
        "```sh runnable\necho three\n```\n",
        encoding="utf-8",
    )
    blocks = collect([doc])
    assert [b.text for b in blocks] == ["echo one\necho two\n", "echo three\n"]
    assert re.fullmatch(r".*doc\.md:5", blocks[0].where)
