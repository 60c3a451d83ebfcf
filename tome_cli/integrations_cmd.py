"""``tome integrations``: where your finished books are delivered (your Audiobookshelf server)."""

from __future__ import annotations

import click

from tome_cli.context import client_of
from tome_cli.display import plain, print_json


@click.group()
def integrations() -> None:
    """Services your books are delivered into (`tome render --abs-library ... --abs-folder ...`)."""


@integrations.group("audiobookshelf")
def audiobookshelf() -> None:
    """Your Audiobookshelf server and API token (the token is stored encrypted, never shown)."""


def _show(found: dict[str, object], as_json: bool) -> None:
    if as_json:
        print_json(found)
    elif found.get("configured"):
        click.echo(f"audiobookshelf: {plain(found.get('url'))}")
    else:
        click.echo("audiobookshelf: not set")


@audiobookshelf.command("set")
@click.argument("url")
@click.option(
    "--token",
    prompt="API token",
    hide_input=True,
    envvar="TOME_ABS_TOKEN",
    help="An API token of an Audiobookshelf user who may upload (env TOME_ABS_TOKEN; asked for if absent, "
    "so that it stays out of the shell's history).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
@click.pass_context
def set_server(ctx: click.Context, url: str, token: str, as_json: bool) -> None:
    """Deliver into the Audiobookshelf server at URL with this token."""
    _show(client_of(ctx).set_audiobookshelf(url, token), as_json)


@audiobookshelf.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
@click.pass_context
def show_server(ctx: click.Context, as_json: bool) -> None:
    """The server set (never its token)."""
    _show(client_of(ctx).get_audiobookshelf(), as_json)


@audiobookshelf.command("forget")
@click.pass_context
def forget_server(ctx: click.Context) -> None:
    """Forget the server and its token; deliveries not yet made then fail."""
    client_of(ctx).forget_audiobookshelf()
    click.echo("audiobookshelf: forgotten")
