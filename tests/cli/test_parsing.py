"""What the CLI parses and formats on its own, without a server."""

import pytest
from allot_cli.durations import format_duration, parse_duration
from allot_cli.main import cli
from allot_cli.output import node_ranges
from click.testing import CliRunner


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("90m", 5400),
        ("2h", 7200),
        ("1h30m", 5400),
        ("45s", 45),
        ("1d", 86400),
        ("3600", 3600),
        ("1.5h", 5400),
        ("2H 15M", 8100),
    ],
)
def test_durations_read_as_people_type_them(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2x", "h", "1h1h", "-5m", "0.3s", "2 hours"])
def test_anything_else_is_not_a_duration(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_durations_print_short():
    assert [format_duration(s) for s in (30, 300, 3600, 5400)] == ["30s", "5m", "1h", "1h30m"]


def test_node_lists_fold_into_slurm_ranges():
    names = ["jupiter-69", "jupiter-70", "jupiter-71", "jupiter-73", "saturn-01", "login"]
    assert node_ranges(names) == "jupiter-[69-71,73],saturn-01,login"
    assert node_ranges(["a-008", "a-009", "a-010"]) == "a-[008-010]"
    assert node_ranges([]) == ""


def test_every_command_has_help_with_examples():
    runner = CliRunner()
    commands = ["login", "submit", "queue", "status", "why", "cancel", "budgets", "exception"]
    for name in commands:
        done = runner.invoke(cli, [name, "--help"])
        assert done.exit_code == 0
        assert "Example" in done.output, name


def test_a_command_without_the_dashes_is_a_usage_error_that_says_so(tmp_path):
    env = {"ALLOT_CONFIG": str(tmp_path / "none.toml")}
    done = CliRunner().invoke(
        cli, ["submit", "-c", "jupiter", "-g", "1", "--min-runtime", "1h", "train.py"], env=env
    )
    assert done.exit_code == 2
    assert "a command goes after `--`" in done.stderr


def _client(pages):
    import httpx
    from allot_cli.client import Client

    def answer(request):
        assert request.headers["Authorization"] == "Token t"
        return httpx.Response(200, json=pages[str(request.url)])

    return Client("https://allot.example.org", "t", transport=httpx.MockTransport(answer))


def test_lists_follow_the_pages_of_the_same_server():
    base = "https://allot.example.org/api/v1/jobs/"
    client = _client(
        {
            base: {"results": [1, 2], "next": f"{base}?limit=2&offset=2"},
            f"{base}?limit=2&offset=2": {"results": [3], "next": None},
        }
    )
    assert client.get_all("/api/v1/jobs/") == [1, 2, 3]


def test_the_token_never_follows_a_page_to_another_host():
    from allot_cli.errors import Refused

    base = "https://allot.example.org/api/v1/jobs/"
    client = _client({base: {"results": [1], "next": "https://elsewhere.example/steal"}})
    with pytest.raises(Refused, match="another host"):
        client.get_all("/api/v1/jobs/")
