"""Every validation pattern matches the whole value: ``$`` also matches before a final newline,
so ``^NAME$`` with ``re.match`` lets ``"LD_PRELOAD\\n"`` through and the batch script then
exports ``LD_PRELOAD`` and runs ``=/tmp/evil.so`` on its own line."""

import ast
import pathlib

import pytest

from scheduling.backends.base import BackendError, LaunchSpec
from scheduling.backends.slurm import batch_script
from scheduling.errors import JobValidationError
from scheduling.identity import set_account
from scheduling.job_env import check_env, parse_lines
from scheduling.models import Job, PosixAccount

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROJECT_DIRS = ("core", "portal", "budgets", "scheduling", "exceptions", "whatif", "cli")


@pytest.mark.parametrize("name", ["LD_PRELOAD\n", "FOO\n", "FOO\r\n"])
def test_a_variable_name_with_a_trailing_newline_is_refused(name):
    with pytest.raises(JobValidationError) as caught:
        check_env({name: "/tmp/evil.so"})
    assert caught.value.field == "env"


def test_the_batch_script_refuses_a_name_with_a_trailing_newline_at_the_edge_too():
    spec = LaunchSpec(7, "k", "t", "u", "", 1, ("n",), 1, "true", env={"LD_PRELOAD\n": "x"})
    with pytest.raises(BackendError, match="cannot be exported"):
        batch_script(spec)


def test_the_form_textarea_still_reads_names_without_their_line_ends():
    assert parse_lines("FOO=1\r\nBAR=2\n") == {"FOO": "1", "BAR": "2"}


def test_the_api_refuses_a_newline_ended_name_and_saves_nothing(client, researcher, cluster):
    client.force_login(researcher)
    body = {"name": "x", "project": "nlp/olmo", "cluster": "jupiter", "gpus": 1}
    body.update(min_runtime_s=3600, env={"LD_PRELOAD\n": "/tmp/evil.so"})
    response = client.post("/api/v1/jobs/", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["field"] == "env"
    assert Job.objects.count() == 0


@pytest.mark.parametrize("name", ["alice\n", "root\n", "alice\r\n"])
def test_a_posix_account_name_with_a_trailing_newline_is_refused(researcher, name):
    with pytest.raises(JobValidationError) as caught:
        set_account(researcher, name, 5001, 5001)
    assert caught.value.field == "name"
    assert not PosixAccount.objects.exists()


def _string_patterns():
    """Each regular expression literal given to re.compile/match/search or RegexValidator in
    the project's own code, with where it is."""
    for folder in PROJECT_DIRS:
        for path in (ROOT / folder).rglob("*.py"):
            if "migrations" in path.parts or ".venv" in path.parts:
                continue
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call) or not node.args:
                    continue
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name not in {"compile", "match", "RegexValidator"}:
                    continue
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    yield f"{path.relative_to(ROOT)}:{node.lineno}", first.value


def test_no_validation_pattern_in_the_project_ends_in_a_dollar():
    """``$`` matches before a trailing newline; ``\\Z`` or ``fullmatch`` does not."""
    offenders = [where for where, pattern in _string_patterns() if pattern.endswith("$")]
    assert offenders == []
