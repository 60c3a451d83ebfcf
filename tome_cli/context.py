"""What every ``tome`` command shares: the exit codes, the client of this run (its server and key from
the options, the environment or the config file), and how durations are written."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import click

from tome_cli.client import Client, TomeError

EXIT_OK, EXIT_API, EXIT_FAILED, EXIT_CONNECTION, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
DEFAULT_URL = "http://127.0.0.1:8000"
TERMINAL = {"succeeded", "failed", "cancelled"}


class WorkFailed(TomeError):
    """A job or a voice's prompt build ended badly on the server (exit 2)."""


class Polling:
    """Knobs tests turn: how often a followed job or voice is polled."""

    seconds = 1.0


def _config_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tome" / "config.toml"


def _from_config(key: str) -> str | None:
    path = _config_file()
    if not path.is_file():
        return None
    try:
        value = tomllib.loads(path.read_text(encoding="utf-8")).get(key)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise click.UsageError(f"cannot read {path}: {exc}") from exc
    return str(value) if value is not None else None


def client_of(ctx: click.Context) -> Client:
    """The client for this run, opened on first use and closed with the command."""
    options: dict[str, Any] = ctx.find_root().obj
    if "client" not in options:
        url = options["url"] or _from_config("url") or DEFAULT_URL
        key = options["api_key"] or _from_config("api_key")
        if not key:
            raise click.UsageError(
                "no API key: pass --api-key, set TOME_API_KEY or api_key in the config file"
            )
        options["client"] = ctx.find_root().with_resource(Client(url, key))
    client: Client = options["client"]
    return client


def duration(seconds: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour."""
    whole = round(seconds)
    return (
        f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"
        if whole >= 3600
        else (f"{whole // 60}:{whole % 60:02d}")
    )
