"""The CLI's failures and their exit codes: 1 refused by the server, 2 bad usage, 3 cannot
reach the server or not authenticated. Each prints as one line on stderr, never a traceback."""

import click

REFUSED, USAGE, UNREACHABLE = 1, 2, 3


class CliError(click.ClickException):
    exit_code = REFUSED

    def show(self, file=None):
        click.echo(f"allot: {self.format_message()}", err=True)


class Refused(CliError):
    """The server said no; its message names the field at fault."""

    exit_code = REFUSED

    def __init__(self, message: str, status: int | None = None, body=None):
        super().__init__(message)
        self.status = status
        self.body = body


class UsageProblem(CliError):
    exit_code = USAGE


class Unreachable(CliError):
    exit_code = UNREACHABLE


class NotAuthenticated(CliError):
    exit_code = UNREACHABLE
