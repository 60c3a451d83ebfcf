"""``tome admin``: every owner's voice caches (an admin key)."""

from __future__ import annotations

import click

from tome_cli.context import client_of
from tome_cli.display import plain, print_json, show, table

CACHE_STATES = ("pending", "processing", "ready", "failed", "stale")


@click.group()
def admin() -> None:
    """Every owner's voice caches (needs an admin key)."""


@admin.command("caches")
@click.option("--status", "cache_status", type=click.Choice(CACHE_STATES), help="Only voices in this state.")
@click.option("--owner", help="Only this owner's voices.")
@click.option("--json", "as_json", is_flag=True, help="Print the voices as JSON.")
@click.pass_context
def admin_caches(ctx: click.Context, cache_status: str | None, owner: str | None, as_json: bool) -> None:
    """Voices of every owner and the state of their speaker prompts (why a build failed, too)."""
    found = client_of(ctx).admin_voices(cache_status, owner)
    if as_json:
        print_json(found)
        return
    rows = [
        (v["owner"], v["name"], v["id"], v["cache_status"], v.get("cache_engine"), v.get("cache_error"))
        for v in found
    ]
    show(table(("owner", "name", "id", "prompt", "engine", "error"), rows, keep=("id",)))
    click.echo(f"{len(found)} voice{'s' if len(found) != 1 else ''}", err=True)


@admin.command("rebuild")
@click.argument("voice_ids", nargs=-1)
@click.option("--status", "statuses", multiple=True, type=click.Choice(CACHE_STATES),
              help="Rebuild every voice in this state (repeatable), e.g. --status failed.")  # fmt: skip
@click.option("--all", "every", is_flag=True, help="Rebuild every voice of every owner.")
@click.option("--force", is_flag=True, help="With voice ids: rebuild even a ready, current prompt.")
@click.pass_context
def admin_rebuild(
    ctx: click.Context, voice_ids: tuple[str, ...], statuses: tuple[str, ...], every: bool, force: bool
) -> None:
    """Queue prompt rebuilds: of the voices given by id, of every voice in a state, or of all voices."""
    if sum((bool(voice_ids), bool(statuses), every)) != 1:
        raise click.UsageError("give voice ids, or --status STATE, or --all (one of them)")
    client = client_of(ctx)
    if not voice_ids:
        queued = client.admin_rebuild_caches(statuses or None)
        click.echo(f"queued {plain(queued['queued'])} of {plain(queued['matched'])} matching voices")
        return
    for voice_id in voice_ids:
        answer = client.admin_rebuild_voice(voice_id, force)
        voice = answer["voice"]
        state = "queued" if answer["queued"] else "not queued (already building, or ready and current)"
        click.echo(f"{plain(voice['id'])}\t{plain(voice['name'])}\t{plain(voice['cache_status'])}\t{state}")
