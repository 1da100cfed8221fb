"""Where the CLI finds its server and token: ``~/.config/allot/config.toml`` (``ALLOT_CONFIG``
overrides the path), then ``ALLOT_URL`` and ``ALLOT_TOKEN`` override what the file says."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from allot_cli.errors import NotAuthenticated, UsageProblem

DEFAULT_URL = "http://127.0.0.1:8000"


def config_path() -> Path:
    explicit = os.environ.get("ALLOT_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "allot" / "config.toml"


@dataclass
class Config:
    url: str | None = None
    token: str | None = None
    username: str | None = None


def read_file(path: Path | None = None) -> Config:
    path = path or config_path()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Config()
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageProblem(f"cannot read {path}: {exc}") from None
    return Config(
        url=_text(data.get("url")),
        token=_text(data.get("token")),
        username=_text(data.get("username")),
    )


def _text(value) -> str | None:
    return value if isinstance(value, str) and value else None


def load() -> Config:
    """The file, then the environment on top of it."""
    found = read_file()
    return Config(
        url=os.environ.get("ALLOT_URL") or found.url,
        token=os.environ.get("ALLOT_TOKEN") or found.token,
        username=found.username,
    )


def require(config: Config) -> tuple[str, str]:
    if not config.url or not config.token:
        raise NotAuthenticated(
            "not logged in: run `allot login` (or set ALLOT_URL and ALLOT_TOKEN)"
        )
    return config.url, config.token


def save(config: Config) -> Path:
    """Write the file readable by its owner alone (0600), in a 0700 folder; the token never
    exists on disk with wider permissions, even for an instant."""
    path = config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    body = {k: v for k, v in vars(config).items() if v}
    partial = path.with_name(path.name + ".tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # O_CREAT's mode does not apply to a file left over
        with os.fdopen(fd, "wb") as handle:
            tomli_w.dump(body, handle)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, path)
    return path
