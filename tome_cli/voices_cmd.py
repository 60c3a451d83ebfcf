"""``tome voices``: your voices, their reference recordings and speaker prompts."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from tome_cli.context import Polling, WorkFailed, client_of
from tome_cli.display import cell, err, plain, print_json, show, table


@click.group()
def voices() -> None:
    """Your voices: reference recordings and their speaker prompts."""


@voices.command("add")
@click.argument("name")
@click.argument("audio", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--text", "ref_text", help="What the recording says, word for word (required with AUDIO).")
@click.option(
    "--embedding",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A speaker-embedding file (safetensors) instead of AUDIO, for an engine with speaker embeddings "
    "(qwen3-tts); --text is then optional.",
)
@click.option("--language", help="en, en-gb, de, ... (the server's default otherwise).")
@click.option("--no-wait", is_flag=True, help="Print the voice and return without waiting for its prompt.")
@click.option("--json", "as_json", is_flag=True, help="Print the voice as JSON.")
@click.pass_context
def voices_add(
    ctx: click.Context,
    name: str,
    audio: Path | None,
    ref_text: str | None,
    embedding: Path | None,
    language: str | None,
    no_wait: bool,
    as_json: bool,
) -> None:
    """Upload AUDIO (a recording, with --text) as the voice NAME and wait until its speaker prompt is
    ready; or make the voice from a speaker embedding (--embedding FILE), ready at once."""
    if audio is not None and embedding is not None:
        raise click.UsageError("give either AUDIO (with --text) or --embedding FILE, not both")
    client = client_of(ctx)
    if embedding is not None:
        voice = client.add_voice_from_embedding(name, embedding, ref_text, language)
        click.echo(
            f"made voice {plain(voice['name'])} ({plain(voice['id'])}) from {embedding.name}", err=True
        )
    elif audio is None:
        raise click.UsageError("give AUDIO (with --text) or --embedding FILE")
    elif not ref_text:
        raise click.UsageError("--text is required with AUDIO: what the recording says, word for word")
    else:
        voice = client.add_voice(name, audio, ref_text, language)
        click.echo(f"uploaded voice {plain(voice['name'])} ({plain(voice['id'])})", err=True)
    shown = _show_warnings(voice, set())
    if not no_wait:
        with err().status(cell(f"speaker prompt: {plain(voice['cache_status'])}")) as status:
            while voice["cache_status"] not in {"ready", "failed"}:
                time.sleep(Polling.seconds)
                voice = client.get_voice(str(voice["id"]))
                status.update(cell(f"speaker prompt: {plain(voice['cache_status'])}"))
        shown = _show_warnings(voice, shown)
    if as_json:
        print_json(voice)
    else:
        click.echo(f"{plain(voice['name'])}\t{plain(voice['id'])}\t{plain(voice['cache_status'])}")
    if voice["cache_status"] == "failed":
        raise WorkFailed(f"the speaker prompt of {voice['name']} failed: {voice.get('cache_error')}")


def _show_warnings(voice: dict[str, Any], shown: set[str]) -> set[str]:
    for warning in voice.get("warnings") or []:
        if warning["code"] not in shown:
            click.echo(f"warning: {plain(warning['code'])}: {plain(warning['message'])}", err=True)
    return shown | {w["code"] for w in voice.get("warnings") or []}


@voices.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the voices as JSON.")
@click.pass_context
def voices_list(ctx: click.Context, as_json: bool) -> None:
    """Your voices and the state of their speaker prompts."""
    found = client_of(ctx).list_voices()
    if as_json:
        print_json(found)
        return
    rows = [
        (
            v["name"],
            v["id"],
            v["language"],
            v["cache_status"],
            ", ".join(w["code"] for w in v.get("warnings") or []),
        )
        for v in found
    ]
    show(table(("name", "id", "lang", "prompt", "warnings"), rows, keep=("id",)))


@voices.command("show")
@click.argument("voice")
@click.option("--json", "as_json", is_flag=True, help="Print the voice as JSON.")
@click.pass_context
def voices_show(ctx: click.Context, voice: str, as_json: bool) -> None:
    """One voice (id or name): its prompt's state, engine and warnings."""
    found = client_of(ctx).find_voice(voice)
    if as_json:
        print_json(found)
        return
    for key in (
        "name",
        "id",
        "language",
        "ref_text",
        "audio_duration",
        "cache_status",
        "cache_error",
        "cache_engine",
        "cache_built_at",
    ):
        if found.get(key) is not None:
            click.echo(f"{key}: {plain(found[key])}")
    for warning in found.get("warnings") or []:
        click.echo(f"warning: {plain(warning['code'])}: {plain(warning['message'])}")


@voices.command("rm")
@click.argument("voice")
@click.pass_context
def voices_rm(ctx: click.Context, voice: str) -> None:
    """Delete a voice (id or name) and its files; refused while an unfinished job uses it."""
    client = client_of(ctx)
    found = client.find_voice(voice)
    client.delete_voice(str(found["id"]))
    click.echo(f"deleted {plain(found['name'])} ({plain(found['id'])})")
