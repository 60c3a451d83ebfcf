"""Following a job with a progress bar (and what Ctrl-C does meanwhile), and saving its files: the book,
one named file, the delivery files of a split or ACX job, or every file. Each download resumes a broken
one (:meth:`tome_cli.client.Client.download`)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

from tome_cli.client import ApiError, Client
from tome_cli.context import EXIT_INTERRUPTED, TERMINAL, Polling, WorkFailed, duration
from tome_cli.display import err, plain

EXTENSIONS = {"ogg": "opus"}  # what the API names each format's download; the rest are the format itself
#: The files a split or ACX job is delivered as, saved beside its book: chapter files and the ACX report.
DELIVERY_KINDS = ("chapter", "report")
ON_INTERRUPT = click.option(
    "--on-interrupt",
    type=click.Choice(["ask", "detach", "cancel"]),
    default="ask",
    show_default=True,
    help="What Ctrl-C does while the job is followed: ask on the terminal (detach without one), leave the "
    "job rendering, or cancel it.",
)


def safe_filename(title: str, extension: str) -> str:
    """A file name from a job title: letters, digits, ``-``, ``_`` and ``.``; never hidden, never empty."""
    stem = re.sub(r"[^\w.-]+", "_", title, flags=re.ASCII).strip("._-")[:100] or "tome-output"
    return f"{stem}.{extension}"


def local_name(name: str) -> str:
    """A server's file name (``chapter-001.mp3``) as a local one: the same when it is a plain name, else
    made safe as :func:`safe_filename` makes a title (never a path, never hidden)."""
    stem, dot, extension = name.rpartition(".")
    if not dot:
        stem, extension = name, "bin"
    return safe_filename(stem, re.sub(r"[^\w]+", "", extension, flags=re.ASCII)[:10] or "bin")


def book_path(job: dict[str, Any], out: Path | None) -> Path:
    """Where the book goes: ``out``, else a name from the title and format in the current folder."""
    fmt = str(job["output"]["format"])
    return out or Path(safe_filename(str(job["title"]), EXTENSIONS.get(fmt, fmt)))


def follow(client: Client, job: dict[str, Any], on_interrupt: str) -> dict[str, Any]:
    """:func:`follow_job`, with Ctrl-C handled as ``on_interrupt`` says."""
    try:
        return follow_job(client, job)
    except KeyboardInterrupt:
        interrupted(client, str(job["id"]), on_interrupt)


def interrupted(client: Client, job_id: str, on_interrupt: str) -> NoReturn:
    """Ctrl-C while following a job: cancel it or leave it rendering, as ``on_interrupt`` says; then exit
    130 either way."""
    shown = plain(job_id)
    if on_interrupt == "ask":
        on_interrupt = "detach"
        if sys.stdin.isatty():
            try:
                if click.confirm(f"\nCancel job {shown}? (no: it keeps rendering)", default=False, err=True):
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
        click.echo(f"job {shown} {plain(job['status'])}", err=True)
        raise SystemExit(EXIT_INTERRUPTED)
    click.echo(
        f"detached: job {shown} keeps rendering.\n"
        f"  resume:  tome jobs download {shown} --wait\n"
        f"  state:   tome jobs show {shown}",
        err=True,
    )
    raise SystemExit(EXIT_INTERRUPTED)


def follow_job(client: Client, job: dict[str, Any]) -> dict[str, Any]:
    """Poll the job with a live progress bar until it ends; raises :class:`WorkFailed` unless it succeeded."""
    columns = (
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[detail]}", markup=False),
    )
    with Progress(*columns, console=err(), transient=False) as bar:
        task = bar.add_task(plain(job["status"]), total=None, detail="")
        while True:
            bar.update(task, **_bar_fields(job))
            if job["status"] in TERMINAL:
                break
            time.sleep(Polling.seconds)
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
        detail += f", ETA {duration(progress['eta_seconds'])}"
    if chapters:
        detail += f", chapters {ready}/{len(chapters)}"
    flagged = (job.get("qa") or {}).get("chunks_flagged") or 0
    if flagged:
        detail += f", QA flags {flagged}"
    return {
        "description": plain(job["status"]),
        "total": total,
        "completed": progress["chunks_done"],
        "detail": plain(detail),
    }


def save(client: Client, url: str, dest: Path, size: int | None) -> int:
    """One download to ``dest`` with a transient progress bar (resuming a broken one); its size."""
    columns = (TextColumn("download", markup=False), BarColumn(), TaskProgressColumn())
    with Progress(*columns, console=err(), transient=True) as bar:
        task = bar.add_task("download", total=size)
        return client.download(url, dest, lambda done, _total: bar.update(task, completed=done))


def download_book(client: Client, job: dict[str, Any], out: Path | None) -> Path:
    """Save the finished job's book (to ``out`` or :func:`book_path`) and say so."""
    output = job["output"]
    if job["status"] != "succeeded" or not output.get("url"):
        raise WorkFailed(f"job {job['id']} is {job['status']}: it has no book to download")
    dest = book_path(job, out)
    size = save(client, str(output["url"]), dest, output.get("bytes"))
    click.echo(f"saved {plain(dest)} ({size} bytes, {duration(float(output.get('duration') or 0))})")
    return dest


def download_files(client: Client, files: list[dict[str, Any]], folder: Path) -> None:
    """Save each of ``files`` (entries of ``GET /v1/jobs/{id}/files``) into ``folder``, each saying so."""
    for entry in files:
        dest = folder / local_name(str(entry["name"]))
        size = save(client, str(entry["url"]), dest, entry.get("bytes"))
        click.echo(f"saved {plain(dest)} ({size} bytes)")


def download_readalong(client: Client, job: dict[str, Any], book: Path) -> None:
    """The job's read-along EPUB beside its book (``book.mp3`` -> ``book-readalong.epub``)."""
    for entry in client.list_files(str(job["id"])):
        if entry["kind"] == "readalong":
            dest = book.with_name(f"{book.stem or book.name}-readalong.epub")
            size = save(client, str(entry["url"]), dest, entry.get("bytes"))
            click.echo(f"saved {plain(dest)} ({size} bytes)")


def download_delivery(client: Client, job: dict[str, Any], book: Path) -> None:
    """A split or ACX job's chapter files and report, into a folder beside the book named as the book
    without its extension (``book.mp3`` -> ``book/chapter-001.mp3``, ``book/acx-report.json``)."""
    output = job["output"]
    if output.get("preset") != "acx" and output.get("split") != "chapter":
        return
    files = [f for f in client.list_files(str(job["id"])) if f["kind"] in DELIVERY_KINDS]
    folder = book.with_suffix("") if book.suffix else book.with_name(f"{book.name}-files")
    download_files(client, files, folder)
