"""The apps are layered: ``core`` (the library: parsing, bulk SQL, logs, fault points, the
SQLite backend) under everything, budgets at the bottom of the apps, scheduling above it, the
exceptions workflow above both (it writes its effects into the apps it acts on). A lower app never
imports a higher one, not even inside a function: it tells them through signals
(``scheduling.signals``)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPS = {"portal", "budgets", "scheduling", "exceptions", "whatif"}
ABOVE = {
    "core": APPS,
    "budgets": {"scheduling", "exceptions"},
    "scheduling": {"exceptions"},
}


def _imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("app", sorted(ABOVE))
def test_a_lower_app_never_imports_a_higher_one(app):
    wrong = {
        str(path.relative_to(ROOT)): sorted(_imported(path) & ABOVE[app])
        for path in (ROOT / app).rglob("*.py")
        if _imported(path) & ABOVE[app]
    }
    assert wrong == {}
