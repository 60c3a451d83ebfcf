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

import json
import os
import re
import sys
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
from rich.table import Table

from tome_cli.client import ApiError, Client, ConnectionProblem, TomeError

EXIT_OK, EXIT_API, EXIT_FAILED, EXIT_CONNECTION, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
DEFAULT_URL = "http://127.0.0.1:8000"
TERMINAL = {"succeeded", "failed", "cancelled"}
ON_INTERRUPT = click.option(
    "--on-interrupt",
    type=click.Choice(["ask", "detach", "cancel"]),
    default="ask",
    show_default=True,
    help="What Ctrl-C does while the job is followed: ask on the terminal (detach without one), leave the "
    "job rendering, or cancel it.",
)
EXTENSIONS = {"ogg": "opus"}  # what the API names each format's download; the rest are the format itself
POLL_SECONDS = 1.0


class WorkFailed(TomeError):
    """A job or a voice's prompt build ended badly on the server (exit 2)."""


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


def _client(ctx: click.Context) -> Client:
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


def _err() -> Console:
    return Console(stderr=True, highlight=False)


def _out() -> Console:
    return Console(highlight=False)


def _print_json(value: object) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True))


def safe_filename(title: str, extension: str) -> str:
    """A file name from a job title: letters, digits, ``-``, ``_`` and ``.``; never hidden, never empty."""
    stem = re.sub(r"[^\w.-]+", "_", title, flags=re.ASCII).strip("._-")[:100] or "tome-output"
    return f"{stem}.{extension}"


class _Group(click.Group):
    """Maps every error to one message on stderr and the documented exit code."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, **extra: Any) -> Any:  # type: ignore[override]
        extra.pop("standalone_mode", None)
        try:
            code = super().main(args, prog_name, standalone_mode=False, **extra)
        except ApiError as exc:
            click.echo(_describe(exc), err=True)
            sys.exit(EXIT_API)
        except WorkFailed as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_FAILED)
        except ConnectionProblem as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_CONNECTION)
        except click.ClickException as exc:
            exc.show()
            sys.exit(EXIT_API)
        except click.exceptions.Abort:  # Ctrl-C anywhere else
            click.echo("Aborted.", err=True)
            sys.exit(EXIT_INTERRUPTED)
        sys.exit(code if isinstance(code, int) else EXIT_OK)


def _describe(exc: ApiError) -> str:
    where = f" (field {exc.field}" if exc.field else ""
    if exc.line is not None:
        where += f"{', ' if where else ' ('}line {exc.line}, column {exc.column}"
    where += ")" if where else ""
    return f"error: {exc.message}{where} [{exc.code}, HTTP {exc.status}]"


@click.group(cls=_Group)
@click.option("--url", envvar="TOME_URL", help="The server, e.g. http://127.0.0.1:8000 (env TOME_URL).")
@click.option("--api-key", envvar="TOME_API_KEY", help="Your API key (env TOME_API_KEY).")
@click.version_option(package_name="tome", prog_name="tome")
@click.pass_context
def app(ctx: click.Context, url: str | None, api_key: str | None) -> None:
    """Render scripts into audiobooks on a Tome server."""
    ctx.obj = {"url": url, "api_key": api_key}


# voices


@app.group()
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
    client = _client(ctx)
    if embedding is not None:
        voice = client.add_voice_from_embedding(name, embedding, ref_text, language)
        click.echo(f"made voice {voice['name']} ({voice['id']}) from {embedding.name}", err=True)
    elif audio is None:
        raise click.UsageError("give AUDIO (with --text) or --embedding FILE")
    elif not ref_text:
        raise click.UsageError("--text is required with AUDIO: what the recording says, word for word")
    else:
        voice = client.add_voice(name, audio, ref_text, language)
        click.echo(f"uploaded voice {voice['name']} ({voice['id']})", err=True)
    shown = _show_warnings(voice, set())
    if not no_wait:
        with _err().status(f"speaker prompt: {voice['cache_status']}") as status:
            while voice["cache_status"] not in {"ready", "failed"}:
                time.sleep(POLL_SECONDS)
                voice = client.get_voice(str(voice["id"]))
                status.update(f"speaker prompt: {voice['cache_status']}")
        shown = _show_warnings(voice, shown)
    if as_json:
        _print_json(voice)
    else:
        click.echo(f"{voice['name']}\t{voice['id']}\t{voice['cache_status']}")
    if voice["cache_status"] == "failed":
        raise WorkFailed(f"the speaker prompt of {voice['name']} failed: {voice.get('cache_error')}")


def _show_warnings(voice: dict[str, Any], shown: set[str]) -> set[str]:
    for warning in voice.get("warnings") or []:
        if warning["code"] not in shown:
            click.echo(f"warning: {warning['code']}: {warning['message']}", err=True)
    return shown | {w["code"] for w in voice.get("warnings") or []}


@voices.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the voices as JSON.")
@click.pass_context
def voices_list(ctx: click.Context, as_json: bool) -> None:
    """Your voices and the state of their speaker prompts."""
    found = _client(ctx).list_voices()
    if as_json:
        _print_json(found)
        return
    table = Table("name", "id", "language", "prompt", "warnings")
    for v in found:
        warnings = ", ".join(w["code"] for w in v.get("warnings") or [])
        table.add_row(v["name"], str(v["id"]), v["language"], v["cache_status"], warnings)
    _out().print(table)


@voices.command("show")
@click.argument("voice")
@click.option("--json", "as_json", is_flag=True, help="Print the voice as JSON.")
@click.pass_context
def voices_show(ctx: click.Context, voice: str, as_json: bool) -> None:
    """One voice (id or name): its prompt's state, engine and warnings."""
    found = _client(ctx).find_voice(voice)
    if as_json:
        _print_json(found)
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
            click.echo(f"{key}: {found[key]}")
    for warning in found.get("warnings") or []:
        click.echo(f"warning: {warning['code']}: {warning['message']}")


@voices.command("rm")
@click.argument("voice")
@click.pass_context
def voices_rm(ctx: click.Context, voice: str) -> None:
    """Delete a voice (id or name) and its files; refused while an unfinished job uses it."""
    client = _client(ctx)
    found = client.find_voice(voice)
    client.delete_voice(str(found["id"]))
    click.echo(f"deleted {found['name']} ({found['id']})")


# render


@app.command()
@click.argument("script", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--voice", required=True, help="The job's voice (id or name).")
@click.option("--title", help="The book's title (else the script's own, else the file's name).")
@click.option("--format", "fmt", type=click.Choice(["mp3", "m4b", "m4a", "ogg", "flac", "wav"]))
@click.option("--preset", type=click.Choice(["acx"]))
@click.option(
    "--script-format",
    type=click.Choice(["plain", "markdown", "ssml", "epub"]),
    help="Else from the extension: .md markdown, .epub epub, .ssml/.xml ssml, else plain.",
)
@click.option(
    "-o",
    "--output",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to save the book (default: a name from the title and format).",
)
@click.option("--no-wait", is_flag=True, help="Print the job id and return at once.")
@ON_INTERRUPT
@click.pass_context
def render(
    ctx: click.Context,
    script: Path,
    voice: str,
    title: str | None,
    fmt: str | None,
    preset: str | None,
    script_format: str | None,
    out: Path | None,
    no_wait: bool,
    on_interrupt: str,
) -> None:
    """Render SCRIPT (txt, md, epub, ssml) into a book, follow it, and download it."""
    client = _client(ctx)
    job: dict[str, Any] = {"voice": voice}
    if title:
        job["title"] = title
    if script_format:
        job["script_format"] = script_format
    output = {k: v for k, v in {"format": fmt, "preset": preset}.items() if v}
    if output:
        job["output"] = output
    try:
        submitted = client.submit_job(script, job)
    except ApiError as exc:
        if title or exc.field != "title" or exc.status != 422:
            raise
        submitted = client.submit_job(script, {**job, "title": script.stem})  # refused: nothing was made
    if no_wait:
        click.echo(submitted["id"])
        return
    click.echo(f"job {submitted['id']}: {submitted['title']}", err=True)
    _follow_and_download(client, submitted, out, on_interrupt)


def _follow_and_download(client: Client, job: dict[str, Any], out: Path | None, on_interrupt: str) -> None:
    try:
        job = _follow(client, job)
    except KeyboardInterrupt:
        _interrupted(client, job["id"], on_interrupt)
    _download(client, job, out)


def _interrupted(client: Client, job_id: str, on_interrupt: str) -> None:
    """Ctrl-C while following a job: cancel it or leave it rendering, as ``on_interrupt`` says; then exit
    130 either way."""
    if on_interrupt == "ask":
        on_interrupt = "detach"
        if sys.stdin.isatty():
            try:
                if click.confirm(f"\nCancel job {job_id}? (no: it keeps rendering)", default=False, err=True):
                    on_interrupt = "cancel"
            except (KeyboardInterrupt, click.Abort):  # a second Ctrl-C at the question: leave it running
                pass
    if on_interrupt == "cancel":
        try:
            job = client.cancel_job(job_id)
        except ApiError as exc:
            if exc.status != 409:  # 409: it ended meanwhile; say where it stands
                raise
            job = client.get_job(job_id)
        click.echo(f"job {job_id} {job['status']}", err=True)
        raise SystemExit(EXIT_INTERRUPTED)
    click.echo(
        f"detached: job {job_id} keeps rendering.\n"
        f"  resume:  tome jobs download {job_id} --wait\n"
        f"  state:   tome jobs show {job_id}",
        err=True,
    )
    raise SystemExit(EXIT_INTERRUPTED)


def _follow(client: Client, job: dict[str, Any]) -> dict[str, Any]:
    """Poll the job with a live progress bar until it ends; raises :class:`WorkFailed` unless it succeeded."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[detail]}"),
    )
    with Progress(*columns, console=_err(), transient=False) as bar:
        task = bar.add_task(job["status"], total=None, detail="")
        while True:
            bar.update(task, **_bar_fields(job))
            if job["status"] in TERMINAL:
                break
            time.sleep(POLL_SECONDS)
            job = client.get_job(str(job["id"]))
    if job["status"] != "succeeded":
        raise WorkFailed(f"job {job['id']} {job['status']}: {job.get('error') or 'no reason given'}")
    return job


def _bar_fields(job: dict[str, Any]) -> dict[str, Any]:
    progress = job["progress"]
    total = progress["chunks_total"] or None
    chapters = job.get("chapters") or []
    ready = sum(1 for c in chapters if c.get("state") == "ready")
    detail = f"{progress['chunks_done']}/{progress['chunks_total']} chunks"
    if progress.get("eta_seconds") is not None:
        detail += f", ETA {_duration(progress['eta_seconds'])}"
    if chapters:
        detail += f", chapters {ready}/{len(chapters)}"
    flagged = (job.get("qa") or {}).get("chunks_flagged") or 0
    if flagged:
        detail += f", QA flags {flagged}"
    return {
        "description": job["status"],
        "total": total,
        "completed": progress["chunks_done"],
        "detail": detail,
    }


def _duration(seconds: float) -> str:
    whole = round(seconds)
    return (
        f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"
        if whole >= 3600
        else (f"{whole // 60}:{whole % 60:02d}")
    )


def _download(client: Client, job: dict[str, Any], out: Path | None) -> None:
    output = job["output"]
    if job["status"] != "succeeded" or not output.get("url"):
        raise WorkFailed(f"job {job['id']} is {job['status']}: it has no book to download")
    fmt = str(output["format"])
    dest = out or Path(safe_filename(str(job["title"]), EXTENSIONS.get(fmt, fmt)))
    columns = (TextColumn("download"), BarColumn(), TaskProgressColumn())
    with Progress(*columns, console=_err(), transient=True) as bar:
        task = bar.add_task("download", total=output.get("bytes"))
        size = client.download(
            str(output["url"]), dest, lambda done, _total: bar.update(task, completed=done)
        )
    click.echo(f"saved {dest} ({size} bytes, {_duration(float(output.get('duration') or 0))})")


# jobs


@app.group()
def jobs() -> None:
    """Your jobs: list, show, files, cancel, download."""


@jobs.command("list")
@click.option("--status", type=click.Choice(sorted(TERMINAL | {"queued", "running", "stitching"})))
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the jobs as JSON.")
@click.pass_context
def jobs_list(ctx: click.Context, status: str | None, limit: int, as_json: bool) -> None:
    """Your jobs, newest first."""
    found = _client(ctx).list_jobs(status, limit)
    if as_json:
        _print_json(found)
        return
    table = Table("id", "title", "status", "progress", "format", "created")
    for j in found:
        table.add_row(
            str(j["id"]),
            j["title"],
            j["status"],
            f"{j['progress']['percent']:.0f}%",
            j["output"]["format"],
            str(j["created_at"]),
        )
    _out().print(table)


@jobs.command("show")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
@click.pass_context
def jobs_show(ctx: click.Context, job_id: str, as_json: bool) -> None:
    """One job: its state, progress, chapters and output."""
    job = _client(ctx).get_job(job_id)
    if as_json:
        _print_json(job)
        return
    out = _out()
    progress = job["progress"]
    out.print(f"{job['title']}  ({job['id']})", markup=False)
    out.print(
        f"status: {job['status']}, {progress['chunks_done']}/{progress['chunks_total']} chunks "
        f"({progress['percent']:.0f}%)",
        markup=False,
    )
    if job.get("error"):
        out.print(f"error: {job['error']}", markup=False)
    output = job["output"]
    if output.get("duration") is not None:
        out.print(
            f"output: {output['format']}, {_duration(output['duration'])}, {output['bytes']} bytes",
            markup=False,
        )
    if job.get("chapters"):
        table = Table("#", "chapter", "start", "state")
        for number, chapter in enumerate(job["chapters"], 1):
            table.add_row(
                str(number), chapter["title"], _duration(chapter["start"] or 0), chapter.get("state") or ""
            )
        out.print(table)


@jobs.command("files")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print the files as JSON.")
@click.pass_context
def jobs_files(ctx: click.Context, job_id: str, as_json: bool) -> None:
    """Every file of a job (book, chapters, ZIP, subtitles, manifest, report) and its download path."""
    found = _client(ctx).list_files(job_id)
    if as_json:
        _print_json(found)
        return
    table = Table("name", "kind", "format", "duration", "bytes", "url")
    for f in found:
        duration = _duration(f["duration"]) if f.get("duration") is not None else ""
        table.add_row(f["name"], f["kind"], f["format"], duration, str(f["bytes"]), f["url"])
    _out().print(table)


@jobs.command("cancel")
@click.argument("job_id")
@click.pass_context
def jobs_cancel(ctx: click.Context, job_id: str) -> None:
    """Cancel an unfinished job (workers stop between chunks)."""
    job = _client(ctx).cancel_job(job_id)
    click.echo(f"{job['id']}\t{job['status']}")


@jobs.command("download")
@click.argument("job_id")
@click.option(
    "-o",
    "--output",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to save the book (default: a name from the title and format).",
)
@click.option("--wait", is_flag=True, help="Follow an unfinished job first, with a progress bar.")
@ON_INTERRUPT
@click.pass_context
def jobs_download(ctx: click.Context, job_id: str, out: Path | None, wait: bool, on_interrupt: str) -> None:
    """Download a finished job's book."""
    client = _client(ctx)
    job = client.get_job(job_id)
    if wait:
        _follow_and_download(client, job, out, on_interrupt)
    else:
        _download(client, job, out)


@app.command()
@click.argument("script", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--voice", required=True, help="The job's voice (id or name).")
@click.option("--title", help="The book's title (else the script's own, else the file's name).")
@click.option("--json", "as_json", is_flag=True, help="Print the whole preview as JSON.")
@click.pass_context
def preview(ctx: click.Context, script: Path, voice: str, title: str | None, as_json: bool) -> None:
    """How a script will be read, before anything is queued: chapters, chunks, warnings, duration."""
    body: dict[str, Any] = {"voice": voice, "title": title or script.stem}
    seen = _client(ctx).preview(script, body)
    if as_json:
        _print_json(seen)
        return
    out = _out()
    out.print(
        f"{seen.get('title') or body['title']}: {len(seen['chapters'])} chapters, {len(seen['chunks'])} "
        f"chunks, about {_duration(seen['estimated_seconds'])} ({seen['language']})",
        markup=False,
    )
    table = Table("#", "chapter", "chunks", "characters", "about")
    for number, chapter in enumerate(seen["chapters"], 1):
        table.add_row(
            str(number),
            chapter.get("title") or "",
            str(chapter["chunks"]),
            str(chapter["characters"]),
            _duration(chapter["estimated_seconds"]),
        )
    out.print(table)
    for warning in seen.get("warnings", []):
        _err().print(f"warning: {warning}", markup=False)


@jobs.command("qa")
@click.argument("job_id")
@click.option("--flagged", is_flag=True, help="Only the chunks kept although they failed QA.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def jobs_qa(ctx: click.Context, job_id: str, flagged: bool, as_json: bool) -> None:
    """Every chunk's quality checks: passed or flagged, takes, reasons, words not heard."""
    report = _client(ctx).job_qa(job_id, flagged)
    if as_json:
        _print_json(report)
        return
    out = _out()
    out.print(
        f"{report['chunks_flagged']} chunks flagged, {report['chunks_rerendered']} rendered again",
        markup=False,
    )
    table = Table("seq", "passed", "takes", "reasons", "missing words")
    for chunk in report["chunks"]:
        passed = "" if chunk["passed"] is None else ("yes" if chunk["passed"] else "FLAGGED")
        table.add_row(
            str(chunk["seq"]),
            passed,
            "" if chunk["renders"] is None else str(chunk["renders"]),
            "; ".join(chunk["reasons"]),
            " ".join(chunk["missing_words"]),
        )
    out.print(table)


@jobs.command("rerender")
@click.argument("job_id")
@click.argument("seq", type=click.IntRange(min=0))
@click.option("--text", help="The chunk's new text (as written); default: the same text, a new take.")
@click.pass_context
def jobs_rerender(ctx: click.Context, job_id: str, seq: int, text: str | None) -> None:
    """Render one chunk of a finished job again; its chapter and the book are stitched again."""
    job = _client(ctx).rerender(job_id, seq, text)
    click.echo(f"{job['id']}\t{job['status']}\trevision {job['revision']}")


# admin

CACHE_STATES = ("pending", "processing", "ready", "failed", "stale")


@app.group()
def admin() -> None:
    """Every owner's voice caches (needs an admin key)."""


@admin.command("caches")
@click.option("--status", "cache_status", type=click.Choice(CACHE_STATES), help="Only voices in this state.")
@click.option("--owner", help="Only this owner's voices.")
@click.option("--json", "as_json", is_flag=True, help="Print the voices as JSON.")
@click.pass_context
def admin_caches(ctx: click.Context, cache_status: str | None, owner: str | None, as_json: bool) -> None:
    """Voices of every owner and the state of their speaker prompts (why a build failed, too)."""
    found = _client(ctx).admin_voices(cache_status, owner)
    if as_json:
        _print_json(found)
        return
    table = Table("owner", "name", "id", "prompt", "engine", "error")
    for v in found:
        table.add_row(
            v["owner"], v["name"], str(v["id"]), v["cache_status"], v.get("cache_engine") or "",
            v.get("cache_error") or "",
        )  # fmt: skip
    _out().print(table)
    _err().print(f"{len(found)} voice{'s' if len(found) != 1 else ''}")


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
    client = _client(ctx)
    if not voice_ids:
        queued = client.admin_rebuild_caches(statuses or None)
        click.echo(f"queued {queued['queued']} of {queued['matched']} matching voices")
        return
    for voice_id in voice_ids:
        answer = client.admin_rebuild_voice(voice_id, force)
        voice = answer["voice"]
        state = "queued" if answer["queued"] else "not queued (already building, or ready and current)"
        click.echo(f"{voice['id']}\t{voice['name']}\t{voice['cache_status']}\t{state}")
