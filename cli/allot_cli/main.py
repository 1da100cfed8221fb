"""The ``allot`` command: its group, ``login``, ``completion``, and the entry point that turns
every failure into one line and an exit code (0 done, 1 refused, 2 usage, 3 unreachable or
not authenticated)."""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING

import click

from allot_cli import __version__, config
from allot_cli.errors import USAGE, CliError, UsageProblem
from allot_cli.output import print_json

if TYPE_CHECKING:
    from allot_cli.client import Client

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class State:
    """What every command shares: the configuration, and a client made on first use."""

    def __init__(self):
        self._client = None

    def client(self) -> Client:
        if self._client is None:
            from allot_cli.client import Client  # httpx only when a command needs it

            url, token = config.require(config.load())
            self._client = Client(url, token)
            # Close the connection when the command ends: no idle keep-alive left to the server.
            click.get_current_context().call_on_close(self._client.http.close)
        return self._client


pass_state = click.make_pass_decorator(State, ensure=True)


def json_option(command):
    """``--json``: print the server's data as JSON instead of a table or a sentence."""

    @click.option("--json", "as_json", is_flag=True, help="Print JSON, for scripts.")
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        return command(*args, **kwargs)

    return wrapper


class AllotGroup(click.Group):
    """Click's group, with our exit codes and every failure as one line on stderr, never a
    traceback (the console script and Click's test runner go through the same path)."""

    def main(self, args=None, prog_name=None, **extra):
        extra.pop("standalone_mode", None)
        try:
            result = super().main(args=args, prog_name=prog_name, standalone_mode=False, **extra)
        except click.UsageError as exc:  # Click's own: bad option, missing argument
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
            click.echo(f"allot: {_one_line(exc.format_message())}{hint}", err=True)
            sys.exit(USAGE)
        except CliError as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"allot: {_one_line(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("allot: interrupted", err=True)
            sys.exit(130)
        except BrokenPipeError:
            sys.exit(0)  # `allot queue | head`
        except OSError as exc:  # the config folder unwritable, a job file unreadable
            click.echo(f"allot: {exc}", err=True)
            sys.exit(USAGE)
        sys.exit(result if isinstance(result, int) else 0)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


@click.group(
    cls=AllotGroup,
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  allot login --url http://127.0.0.1:8000 --username researcher
  allot submit --project nlp/olmo --cluster jupiter --gpus 8 --min-runtime 2h -- python train.py
  allot queue --mine
  allot why 42
  allot exception protection 42 --hours 12 --why "deadline run"

Configuration: ~/.config/allot/config.toml (ALLOT_CONFIG moves it); ALLOT_URL and ALLOT_TOKEN
override it. Exit codes: 0 done, 1 refused by the server, 2 bad usage, 3 cannot reach the
server or not logged in. Shell completion: allot completion --help.""",
)
@click.version_option(__version__, "-V", "--version", prog_name="allot")
def cli():
    """Submit GPU jobs to Allot, follow the queue, ask why, and cancel, from the terminal."""


@cli.command(
    epilog="""\b
Examples:
  allot login --url https://allot.example.org --username ada
  echo "$PASSWORD" | allot login --username ada --password-stdin"""
)
@click.option("--url", help="The server (default: ALLOT_URL, the saved one, or a prompt).")
@click.option("--username", "-u", help="Your username (prompted if missing).")
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
@json_option
def login(url, username, password_stdin, as_json):
    """Log in and save the server's URL and an API token (file mode 0600)."""
    saved = config.read_file()
    url = url or config.load().url or click.prompt("Server URL", default=config.DEFAULT_URL)
    url = url.rstrip("/")
    if "://" not in url:
        raise UsageProblem(f"--url: {url!r} needs a scheme, e.g. https://{url}")
    username = username or click.prompt("Username", default=saved.username or None)
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            raise UsageProblem("--password-stdin: standard input held no password")
    else:
        password = click.prompt("Password", hide_input=True)
    from allot_cli.client import Client

    with Client(url) as anonymous:
        answer = anonymous.post("/api/v1/auth/token/", {"username": username, "password": password})
    path = config.save(config.Config(url=url, token=answer["token"], username=username))
    if as_json:
        print_json(
            {"url": url, "username": username, "expiry": answer.get("expiry"), "config": str(path)}
        )
        return
    expiry = answer.get("expiry")
    until = f", valid until {expiry}" if expiry else ""
    click.echo(f"Logged in to {url} as {username}{until}. Token saved in {path}.")


@cli.command(
    epilog="""\b
Bash:  eval "$(allot completion bash)"     (in ~/.bashrc)
Zsh:   eval "$(allot completion zsh)"      (in ~/.zshrc)
Fish:  allot completion fish > ~/.config/fish/completions/allot.fish"""
)
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell):
    """Print the shell completion script for SHELL."""
    from click.shell_completion import get_completion_class

    script = get_completion_class(shell)(cli, {}, "allot", "_ALLOT_COMPLETE").source()
    click.echo(script)


def _register():
    from allot_cli import budgets_cmd, exception_cmd, jobs

    for command in (*jobs.COMMANDS, budgets_cmd.budgets, exception_cmd.exception):
        cli.add_command(command)


_register()


def main(argv=None) -> None:
    """The console script."""
    cli.main(args=argv, prog_name="allot")
