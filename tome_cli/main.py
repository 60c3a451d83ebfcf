"""``tome``: the command line of Tome, built on :mod:`tome_cli.client` (REST API only).

The server and key come from ``--url``/``--api-key``, else ``TOME_URL``/``TOME_API_KEY``, else the
optional config file ``$XDG_CONFIG_HOME/tome/config.toml`` (default ``~/.config/tome/config.toml``) with
``url = "..."`` and ``api_key = "..."``; the URL defaults to ``http://127.0.0.1:8000``.

Exit codes, stable for scripts:

- 0: done.
- 1: the API refused the request (its code, field and message on stderr) or the command line was wrong.
- 2: the work failed on the server: a job ended failed or cancelled, or a voice's prompt build failed.
- 3: no answer from the server (refused, timed out, broken connection).
- 130: interrupted (Ctrl-C). While ``tome render`` (or ``jobs download --wait``) follows a job, Ctrl-C
  does what ``--on-interrupt`` says: ``detach`` (the job keeps rendering; its id and how to resume are
  printed), ``cancel`` (the job is cancelled), or ``ask`` (the default: a question on the terminal, and
  detach when there is no terminal to ask on, as in a script; a second Ctrl-C at the question detaches).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from tome_cli.admin_cmd import admin
from tome_cli.client import AmbiguousId, ApiError, ConnectionProblem
from tome_cli.context import (
    EXIT_API,
    EXIT_CONNECTION,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    WorkFailed,
)
from tome_cli.display import plain
from tome_cli.integrations_cmd import integrations
from tome_cli.jobs_cmd import jobs, preview, render
from tome_cli.voices_cmd import voices

__all__ = ["EXIT_API", "EXIT_CONNECTION", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "app"]


class _Group(click.Group):
    """Maps every error to one message on stderr and the documented exit code."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, **extra: Any) -> Any:  # type: ignore[override]
        extra.pop("standalone_mode", None)
        try:
            code = super().main(args, prog_name, standalone_mode=False, **extra)
        except ApiError as exc:
            click.echo(_describe(exc), err=True)
            sys.exit(EXIT_API)
        except AmbiguousId as exc:
            click.echo(f"error: {plain(exc)}", err=True)
            sys.exit(EXIT_API)
        except WorkFailed as exc:
            click.echo(f"error: {plain(exc)}", err=True)
            sys.exit(EXIT_FAILED)
        except ConnectionProblem as exc:
            click.echo(f"error: {plain(exc)}", err=True)
            sys.exit(EXIT_CONNECTION)
        except click.ClickException as exc:
            exc.show()
            sys.exit(EXIT_API)
        except click.exceptions.Abort:  # Ctrl-C anywhere else
            click.echo("Aborted.", err=True)
            sys.exit(EXIT_INTERRUPTED)
        sys.exit(code if isinstance(code, int) else EXIT_OK)


def _describe(exc: ApiError) -> str:
    where = f" (field {plain(exc.field)}" if exc.field else ""
    if exc.line is not None:
        where += f"{', ' if where else ' ('}line {plain(exc.line)}, column {plain(exc.column)}"
    where += ")" if where else ""
    return f"error: {plain(exc.message)}{where} [{plain(exc.code)}, HTTP {exc.status}]"


@click.group(cls=_Group)
@click.option("--url", envvar="TOME_URL", help="The server, e.g. http://127.0.0.1:8000 (env TOME_URL).")
@click.option("--api-key", envvar="TOME_API_KEY", help="Your API key (env TOME_API_KEY).")
@click.version_option(package_name="tome", prog_name="tome")
@click.pass_context
def app(ctx: click.Context, url: str | None, api_key: str | None) -> None:
    """Render scripts into audiobooks on a Tome server."""
    ctx.obj = {"url": url, "api_key": api_key}


for command in (voices, render, preview, jobs, integrations, admin):
    app.add_command(command)
