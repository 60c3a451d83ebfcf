"""``tome render``, ``tome preview`` and ``tome jobs``: books from scripts, and everything about a job
(its state, files, QA, re-renders). A job is named by its id or a unique prefix of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tome_cli.client import ApiError
from tome_cli.context import TERMINAL, WorkFailed, client_of, duration
from tome_cli.display import plain, print_json, show, table
from tome_cli.follow import (
    ON_INTERRUPT,
    book_path,
    download_book,
    download_delivery,
    download_files,
    download_readalong,
    follow,
    local_name,
    save,
)
from tome_cli.job_options import job_body, job_options

OUTPUT = click.option(
    "-o",
    "--output",
    "out_path",
    type=click.Path(path_type=Path),
    help="Where to save the book (default: a name from the title and format); with --all, the folder.",
)


@click.command()
@click.argument("script", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--voice", required=True, help="The job's voice (id, name or id prefix).")
@job_options
@OUTPUT
@click.option("--no-wait", is_flag=True, help="Print the job id and return at once.")
@ON_INTERRUPT
@click.pass_context
def render(
    ctx: click.Context,
    /,
    script: Path,
    voice: str,
    out_path: Path | None,
    no_wait: bool,
    on_interrupt: str,
    **options: Any,
) -> None:
    """Render SCRIPT (txt, md, epub, ssml) into a book, follow it, and download it (with a split or the
    ACX preset, its chapter files and report too, into a folder named as the book; with --readalong,
    its read-along EPUB beside it)."""
    client = client_of(ctx)
    job = job_body(client.voice_ref(voice), options)
    cover = options["cover"]
    try:
        submitted = client.submit_job(script, job, cover)
    except ApiError as exc:
        if options["title"] or exc.field != "title" or exc.status != 422:
            raise
        submitted = client.submit_job(script, {**job, "title": script.stem}, cover)  # nothing was made
    if no_wait:
        click.echo(plain(submitted["id"]))
        return
    click.echo(f"job {plain(submitted['id'])}: {plain(submitted['title'])}", err=True)
    done = follow(client, submitted, on_interrupt)
    book = download_book(client, done, out_path)
    download_delivery(client, done, book)
    if options["readalong"]:
        download_readalong(client, done, book)


@click.command()
@click.argument("script", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--voice", required=True, help="The job's voice (id, name or id prefix).")
@job_options
@click.option("--json", "as_json", is_flag=True, help="Print the whole preview as JSON.")
@click.pass_context
def preview(ctx: click.Context, /, script: Path, voice: str, as_json: bool, **options: Any) -> None:
    """How a script will be read, before anything is queued: chapters, chunks, warnings, duration. It
    takes the options of ``tome render``."""
    client = client_of(ctx)
    body = {"title": script.stem, **job_body(client.voice_ref(voice), options)}
    seen = client.preview(script, body)
    if as_json:
        print_json(seen)
        return
    click.echo(
        f"{plain(seen.get('title') or body['title'])}: {len(seen['chapters'])} chapters, "
        f"{len(seen['chunks'])} chunks, about {duration(seen['estimated_seconds'])} "
        f"({plain(seen['language'])})"
    )
    rows = [
        (n, c.get("title"), c["chunks"], c["characters"], duration(c["estimated_seconds"]))
        for n, c in enumerate(seen["chapters"], 1)
    ]
    show(table(("#", "chapter", "chunks", "characters", "about"), rows))
    for warning in seen.get("warnings", []):
        click.echo(f"warning: {plain(warning)}", err=True)


@click.group()
def jobs() -> None:
    """Your jobs: list, show, files, download, QA, re-render, cancel."""


@jobs.command("list")
@click.option("--status", type=click.Choice(sorted(TERMINAL | {"queued", "running", "stitching"})))
@click.option("--limit", type=click.IntRange(1, 500), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the jobs as JSON.")
@click.pass_context
def jobs_list(ctx: click.Context, status: str | None, limit: int, as_json: bool) -> None:
    """Your jobs, newest first, with their whole ids."""
    found = client_of(ctx).list_jobs(status, limit)
    if as_json:
        print_json(found)
        return
    rows = [
        (
            j["id"],
            j["status"] if j["status"] in TERMINAL else f"{j['status']} {j['progress']['percent']:.0f}%",
            _minute(str(j["created_at"])),
            j["output"]["format"],
            j["title"],
        )
        for j in found
    ]
    show(table(("id", "status", "created", "format", "title"), rows, keep=("id",)))


def _minute(stamp: str) -> str:
    """An ISO time as ``MM-DD HH:MM`` (UTC, as the API gives it); the whole one is in --json."""
    return stamp[5:16].replace("T", " ")


@jobs.command("show")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
@click.pass_context
def jobs_show(ctx: click.Context, job_id: str, as_json: bool) -> None:
    """One job: its state, progress, chapters and output."""
    client = client_of(ctx)
    job = client.get_job(client.resolve_job(job_id))
    if as_json:
        print_json(job)
        return
    progress = job["progress"]
    click.echo(f"{plain(job['title'])}  ({plain(job['id'])})")
    click.echo(
        f"status: {plain(job['status'])}, {plain(progress['chunks_done'])}/"
        f"{plain(progress['chunks_total'])} chunks ({progress['percent']:.0f}%)"
    )
    if job.get("error"):
        click.echo(f"error: {plain(job['error'])}")
    output = job["output"]
    if output.get("duration") is not None:
        click.echo(
            f"output: {plain(output['format'])}, {duration(output['duration'])}, "
            f"{plain(output['bytes'])} bytes"
        )
    if job.get("chapters"):
        rows = [
            (n, c["title"], duration(c["start"] or 0), c.get("state"))
            for n, c in enumerate(job["chapters"], 1)
        ]
        show(table(("#", "chapter", "start", "state"), rows))


@jobs.command("files")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print the files as JSON.")
@click.pass_context
def jobs_files(ctx: click.Context, job_id: str, as_json: bool) -> None:
    """Every file of a job (book, chapters, ZIP, subtitles, manifest, report): the names
    ``tome jobs download JOB --file NAME`` takes."""
    client = client_of(ctx)
    found = client.list_files(client.resolve_job(job_id))
    if as_json:
        print_json(found)
        return
    rows = [
        (
            f["name"],
            f["kind"],
            f["format"],
            duration(f["duration"]) if f.get("duration") is not None else "",
            f["bytes"],
        )
        for f in found
    ]
    show(table(("name", "kind", "format", "duration", "bytes"), rows, keep=("name",)))


@jobs.command("cancel")
@click.argument("job_id")
@click.pass_context
def jobs_cancel(ctx: click.Context, job_id: str) -> None:
    """Cancel an unfinished job (workers stop between chunks)."""
    client = client_of(ctx)
    job = client.cancel_job(client.resolve_job(job_id))
    click.echo(f"{plain(job['id'])}\t{plain(job['status'])}")


@jobs.command("download")
@click.argument("job_id")
@OUTPUT
@click.option("--file", "names", multiple=True, help="One of the job's files (see `tome jobs files`).")
@click.option("--all", "every", is_flag=True, help="Every file of the job, into a folder.")
@click.option("--wait", is_flag=True, help="Follow an unfinished job first, with a progress bar.")
@ON_INTERRUPT
@click.pass_context
def jobs_download(
    ctx: click.Context,
    job_id: str,
    out_path: Path | None,
    names: tuple[str, ...],
    every: bool,
    wait: bool,
    on_interrupt: str,
) -> None:
    """Download a job's book (default), some of its files (--file NAME, repeatable), or all of them
    (--all). -o is the book's or the one file's path, or the folder the files go to (one named after the
    title for --all). A broken download resumes where it stopped."""
    if names and every:
        raise click.UsageError("give --file NAME or --all, not both")
    client = client_of(ctx)
    job = client.get_job(client.resolve_job(job_id))
    if wait:
        job = follow(client, job, on_interrupt)
    if not names and not every:
        download_book(client, job, out_path)
        return
    files = client.list_files(str(job["id"]))
    if every:
        download_files(client, files, out_path or book_path(job, None).with_suffix(""))
        return
    by_name = {str(f["name"]): f for f in files}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise click.UsageError(
            f"job {plain(job['id'])} has no file {plain(unknown[0])!r}; it has: "
            + ", ".join(plain(n) for n in by_name)
        )
    for name in names:
        entry = by_name[name]
        if len(names) == 1 and out_path is not None and not out_path.is_dir():
            dest = out_path
        else:
            dest = (out_path or Path()) / local_name(name)
        size = save(client, str(entry["url"]), dest, entry.get("bytes"))
        click.echo(f"saved {plain(dest)} ({size} bytes)")


@jobs.command("qa")
@click.argument("job_id")
@click.option("--flagged", is_flag=True, help="Only the chunks kept although they failed QA.")
@click.option(
    "--accept",
    "accept",
    type=click.IntRange(min=0),
    multiple=True,
    metavar="SEQ",
    help="Accept a flagged chunk as it is (repeatable): it stays in the report, accepted.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def jobs_qa(ctx: click.Context, job_id: str, flagged: bool, accept: tuple[int, ...], as_json: bool) -> None:
    """Every chunk's quality checks: passed, flagged or accepted, takes, reasons, words not heard."""
    client = client_of(ctx)
    job_id = client.resolve_job(job_id)
    for seq in accept:
        client.accept_flag(job_id, seq)
        click.echo(f"accepted chunk {seq}", err=True)
    report = client.job_qa(job_id, flagged)
    if as_json:
        print_json(report)
        return
    click.echo(
        f"{plain(report['chunks_flagged'])} chunks flagged, "
        f"{plain(report['chunks_rerendered'])} rendered again"
    )
    rows = [(c["seq"], _verdict(c), c["renders"], "; ".join(c["reasons"]), " ".join(c["missing_words"]))
            for c in report["chunks"]]  # fmt: skip
    show(table(("seq", "passed", "takes", "reasons", "missing words"), rows))


def _verdict(chunk: dict[str, Any]) -> str:
    if chunk.get("accepted_at"):
        return "accepted"
    if chunk["passed"] is None:
        return ""
    return "yes" if chunk["passed"] else "FLAGGED"


@jobs.command("rerender")
@click.argument("job_id")
@click.argument("seq", type=click.IntRange(min=0))
@click.option("--text", help="The chunk's new text (as written); default: the same text, a new take.")
@click.option("--wait", is_flag=True, help="Follow the re-render, then download the new book.")
@OUTPUT
@ON_INTERRUPT
@click.pass_context
def jobs_rerender(
    ctx: click.Context,
    job_id: str,
    seq: int,
    text: str | None,
    wait: bool,
    out_path: Path | None,
    on_interrupt: str,
) -> None:
    """Render one chunk of a finished job again; its chapter and the book are stitched again. With
    --wait, follow it and save the new book (to -o, or the name `tome render` gave it), with a split or
    ACX job's chapter files and report."""
    client = client_of(ctx)
    job = client.rerender(client.resolve_job(job_id), seq, text)
    click.echo(f"{plain(job['id'])}\t{plain(job['status'])}\trevision {plain(job['revision'])}")
    if not wait:
        return
    done = follow(client, job, on_interrupt)
    rerender = done.get("rerender") or {}
    if rerender.get("state") != "published":
        raise WorkFailed(
            f"the re-render of chunk {seq} was {rerender.get('state')}: {rerender.get('error')}; "
            "the book keeps its previous take"
        )
    download_delivery(client, done, download_book(client, done, out_path))
