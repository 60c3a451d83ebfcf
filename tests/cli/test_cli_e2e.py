"""The ``tome`` command line against a real stack: the API under gunicorn on 127.0.0.1 and, where a test
needs them, real Celery workers. The CLI runs in-process (click's runner) with TOME_URL/TOME_API_KEY set,
and once as the installed console script."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from flask import Flask
from sqlalchemy import update
from sqlalchemy.orm import Session, scoped_session

from models import Voice
from tests.cli.conftest import Stack
from tests.e2e.flow import BOOK
from tests.support.api_server import free_port
from tests.support.epubs import build_epub
from tome_cli.client import Client, script_format_for
from tome_cli.context import Polling
from tome_cli.follow import EXTENSIONS, safe_filename
from tome_cli.main import (
    EXIT_API,
    EXIT_CONNECTION,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
)
from tome_cli.main import app as tome
from webapi.cli import mint_key
from worker.audio import decode_to_pcm
from worker.config import Settings


@pytest.mark.e2e
def test_voice_render_download_and_inspect(
    rendering: Stack,
    tmp_path: Path,
    reference: tuple[Path, str],
) -> None:
    stack = rendering
    added = stack.add_voice(reference)
    assert added.exit_code == EXIT_OK, added.output
    assert added.stdout.strip().endswith("\tready"), added.stdout
    assert "speaker prompt" in added.stderr or "uploaded voice narrator" in added.stderr

    listed = stack.run("voices", "list", "--json")
    assert [(v["name"], v["cache_status"]) for v in json.loads(listed.stdout)] == [("narrator", "ready")]
    assert "narrator" in stack.run("voices", "list").stdout

    book = tmp_path / "harbour.md"
    book.write_text(BOOK, encoding="utf-8")
    out = tmp_path / "out" / "book.mp3"
    rendered = stack.run(
        "render", str(book), "--voice", "narrator", "--format", "mp3", "--readalong", "-o", str(out)
    )
    assert rendered.exit_code == EXIT_OK, rendered.output
    assert f"saved {out}" in rendered.stdout
    along = out.with_name("book-readalong.epub")  # asked for, and saved beside the book
    assert f"saved {along}" in rendered.stdout
    assert zipfile.ZipFile(along).read("mimetype") == b"application/epub+zip"
    assert "100%" in rendered.stderr  # the progress bar's last state
    assert "chapters 3/3" in rendered.stderr

    jobs = json.loads(stack.run("jobs", "list", "--json").stdout)
    assert len(jobs) == 1
    job = json.loads(stack.run("jobs", "show", jobs[0]["id"], "--json").stdout)
    assert job["status"] == "succeeded"
    assert job["script_format"] == "markdown"  # from the .md extension
    assert job["title"] == "harbour"  # the script names none: the file's name
    assert out.stat().st_size == job["output"]["bytes"]
    rate = 24000
    duration = len(decode_to_pcm(out, rate)) / rate
    assert abs(duration - job["output"]["duration"]) < 0.05, (duration, job["output"]["duration"])

    shown = stack.run("jobs", "show", job["id"])
    assert "succeeded" in shown.stdout
    assert "The Storm" in shown.stdout
    files = json.loads(stack.run("jobs", "files", job["id"], "--json").stdout)
    assert {"book.srt", "manifest.json"} <= {f["name"] for f in files}
    qa = json.loads(stack.run("jobs", "qa", job["id"], "--json").stdout)
    assert qa["chunks_flagged"] == 0
    assert len(qa["chunks"]) == job["progress"]["chunks_total"]
    assert all(c["passed"] for c in qa["chunks"])
    assert "0 chunks flagged" in stack.run("jobs", "qa", job["id"]).stdout
    shown_voice = json.loads(stack.run("voices", "show", "narrator", "--json").stdout)
    assert shown_voice["cache_status"] == "ready"
    again = tmp_path / "again.mp3"
    downloaded = stack.run("jobs", "download", job["id"], "-o", str(again))
    assert downloaded.exit_code == EXIT_OK, downloaded.output
    assert again.read_bytes() == out.read_bytes()

    # A broken download resumes from its .part file; one whose ETag no longer matches comes whole.
    book_url = stack.url + job["output"]["url"]
    auth = {"Authorization": f"Bearer {stack.key}"}
    etag = httpx.head(book_url, headers=auth).headers["ETag"]
    ranged = httpx.get(book_url, headers={**auth, "Range": "bytes=1000-", "If-Range": etag})
    assert ranged.status_code == 206  # what resuming relies on
    for kept, tag in [(out.read_bytes()[:1000], etag), (b"stale" * 300, '"stale"')]:
        resumed = tmp_path / "resumed.mp3"
        resumed.unlink(missing_ok=True)
        (tmp_path / ".resumed.mp3.part").write_bytes(kept)
        (tmp_path / ".resumed.mp3.part.etag").write_text(tag)
        assert stack.run("jobs", "download", job["id"], "-o", str(resumed)).exit_code == EXIT_OK
        assert resumed.read_bytes() == out.read_bytes()
        assert not (tmp_path / ".resumed.mp3.part").exists()
        assert not (tmp_path / ".resumed.mp3.part.etag").exists()

    # one chunk rendered again with new text: the job runs again, then the book is the new revision
    redo = stack.run("jobs", "rerender", job["id"], "1", "--text", "The fog came in at noon.")
    assert redo.exit_code == EXIT_OK, redo.output
    assert redo.stdout.split("\t")[1:] == ["running", "revision 1\n"], redo.stdout
    fresh = tmp_path / "fresh.mp3"
    assert stack.run("jobs", "download", job["id"], "--wait", "-o", str(fresh)).exit_code == EXIT_OK
    redone = json.loads(stack.run("jobs", "show", job["id"], "--json").stdout)
    assert (redone["status"], redone["revision"]) == ("succeeded", 1)
    assert fresh.stat().st_size == redone["output"]["bytes"]
    assert fresh.read_bytes() != out.read_bytes()
    refused = stack.run("jobs", "rerender", job["id"], "999")
    assert refused.exit_code == EXIT_API
    assert "no rendered chunk 999" in refused.stderr


@pytest.mark.e2e
def test_an_epub_preview_is_polled_until_a_worker_has_planned_it(
    stack: Stack,
    settings: Settings,
    tmp_path: Path,
    reference: tuple[Path, str],
    start_worker: Callable[..., Any],
) -> None:
    """The server answers an EPUB's preview 202 and plans it on a worker; the CLI polls the Location it
    names and prints the preview (or, for a broken book, the error the worker found)."""
    start_worker(settings, concurrency=1)
    ref, transcript = reference
    added = stack.run("voices", "add", "narrator", str(ref), "--text", transcript, "--no-wait")
    assert added.exit_code == EXIT_OK, added.output
    book = tmp_path / "novel.epub"
    book.write_bytes(build_epub())
    previewed = stack.run("preview", str(book), "--voice", "narrator", "--json")
    assert previewed.exit_code == EXIT_OK, previewed.output
    assert json.loads(previewed.stdout)["chapters"], previewed.stdout
    broken = tmp_path / "broken.epub"
    broken.write_bytes(b"PK\x03\x04 not a zip")
    refused = stack.run("preview", str(broken), "--voice", "narrator")
    assert refused.exit_code == EXIT_API, refused.output
    assert "not an EPUB" in refused.stderr, refused.stderr


def test_no_wait_prints_the_id_and_cancel(stack: Stack, tmp_path: Path, reference: tuple[Path, str]) -> None:
    """No worker runs: the voice stays pending and the job queued, which is all --no-wait needs."""
    ref, transcript = reference
    added = stack.run("voices", "add", "narrator", str(ref), "--text", transcript, "--no-wait")
    assert added.exit_code == EXIT_OK, added.output
    book = tmp_path / "harbour.md"
    book.write_text(BOOK, encoding="utf-8")
    seen = stack.run("preview", str(book), "--voice", "narrator")
    assert seen.exit_code == EXIT_OK, seen.output
    assert "3 chapters" in seen.stdout
    assert "The Storm" in seen.stdout
    previewed = json.loads(stack.run("preview", str(book), "--voice", "narrator", "--json").stdout)
    assert [c["title"] for c in previewed["chapters"]] == ["The Harbour", "The Storm", "The Morning After"]
    assert stack.run("preview", str(book), "--voice", "Nobody").exit_code == EXIT_API
    script = tmp_path / "note.txt"
    script.write_text("A short note, read aloud.\n", encoding="utf-8")
    submitted = stack.run("render", str(script), "--voice", "narrator", "--title", "Note", "--no-wait")
    assert submitted.exit_code == EXIT_OK, submitted.output
    job_id = submitted.stdout.strip()
    job = json.loads(stack.run("jobs", "show", job_id, "--json").stdout)
    assert (job["title"], job["script_format"], job["status"]) == ("Note", "plain", "queued")
    cancelled = stack.run("jobs", "cancel", job_id)
    assert cancelled.stdout.strip() == f"{job_id}\tcancelled"
    again = stack.run("jobs", "cancel", job_id)  # 409: it already ended
    assert again.exit_code == EXIT_API
    assert "HTTP 409" in again.stderr
    removed = stack.run("voices", "rm", "narrator")
    assert removed.stdout.startswith("deleted narrator")
    gone = stack.run("voices", "show", "narrator")
    assert gone.exit_code == EXIT_API
    assert (
        gone.stderr
        == "error: you have no voice with id or name 'narrator' (field voice) [not_found, HTTP 404]\n"
    )


def test_admin_lists_caches_and_rebuilds_the_failed_ones(
    app: Flask, db: scoped_session[Session], stack: Stack, reference: tuple[Path, str]
) -> None:
    """No worker runs: a rebuilt voice goes back to pending, which is what the admin asked for."""
    admin_key = mint_key(app, owner="ops", name="admin", admin=True)
    ref, transcript = reference
    for name in ("good", "broken"):
        added = stack.run("voices", "add", name, str(ref), "--text", transcript, "--no-wait")
        assert added.exit_code == EXIT_OK, added.output
    voices = {v["name"]: v for v in json.loads(stack.run("voices", "list", "--json").stdout)}
    broken = uuid.UUID(voices["broken"]["id"])
    db.execute(
        update(Voice).where(Voice.id == broken).values(cache_status="failed", cache_error="bad <audio>")
    )
    db.commit()

    listed = stack.run("admin", "caches", key=admin_key, env={"COLUMNS": "200"})
    assert listed.exit_code == EXIT_OK, listed.output
    assert "bad <audio>" in listed.stdout
    assert "2 voices" in listed.stderr
    failed = json.loads(stack.run("admin", "caches", "--status", "failed", "--json", key=admin_key).stdout)
    assert [(v["name"], v["owner"], v["cache_status"]) for v in failed] == [("broken", "alice", "failed")]
    assert json.loads(stack.run("admin", "caches", "--owner", "nobody", "--json", key=admin_key).stdout) == []

    rebuilt = stack.run("admin", "rebuild", "--status", "failed", key=admin_key)
    assert rebuilt.exit_code == EXIT_OK, rebuilt.output
    assert rebuilt.stdout == "queued 1 of 1 matching voices\n"
    assert (
        json.loads(stack.run("admin", "caches", "--status", "failed", "--json", key=admin_key).stdout) == []
    )
    one = stack.run("admin", "rebuild", str(broken), key=admin_key)
    assert one.exit_code == EXIT_OK, one.output
    assert one.stdout.startswith(f"{broken}\tbroken\tpending\tnot queued")  # already waiting for a build

    refused = stack.run("admin", "caches")  # a user key
    assert refused.exit_code == EXIT_API
    assert "HTTP 403" in refused.stderr
    unknown = stack.run("admin", "rebuild", str(uuid.uuid4()), key=admin_key)
    assert unknown.exit_code == EXIT_API
    assert "HTTP 404" in unknown.stderr
    for args in ([], ["--all", "--status", "failed"], [str(broken), "--all"]):
        wrong = stack.run("admin", "rebuild", *args, key=admin_key)
        assert wrong.exit_code == EXIT_API
        assert "give voice ids, or --status STATE, or --all" in wrong.stderr


def test_voices_add_takes_a_recording_or_an_embedding_never_both(
    stack: Stack, tmp_path: Path, reference: tuple[Path, str]
) -> None:
    """What the command line refuses itself, and an embedding on an engine without embeddings (espeak):
    the API's 422, named. Nothing is created. (Accepted embeddings: tests/qwen3/test_cli_embeddings.py.)"""
    ref, transcript = reference
    embedding = tmp_path / "voice.safetensors"
    embedding.write_bytes(b"not looked at by the command line")
    both = stack.run("voices", "add", "xvec", str(ref), "--text", transcript, "--embedding", str(embedding))
    assert both.exit_code == EXIT_API
    assert "not both" in both.stderr
    neither = stack.run("voices", "add", "xvec", "--text", transcript)
    assert neither.exit_code == EXIT_API
    assert "give AUDIO (with --text) or --embedding FILE" in neither.stderr
    untold = stack.run("voices", "add", "xvec", str(ref))
    assert untold.exit_code == EXIT_API
    assert "--text is required with AUDIO" in untold.stderr
    unsupported = stack.run("voices", "add", "xvec", "--embedding", str(embedding))
    assert unsupported.exit_code == EXIT_API
    assert "(field embedding) [embedding_unsupported, HTTP 422]" in unsupported.stderr
    assert "espeak" in unsupported.stderr
    assert json.loads(stack.run("voices", "list", "--json").stdout) == []


def test_an_api_error_exits_1_with_its_message_and_field(stack: Stack, tmp_path: Path) -> None:
    script = tmp_path / "book.md"
    script.write_text("# One\n\nHello.\n", encoding="utf-8")
    result = stack.run("render", str(script), "--voice", "Nobody")
    assert result.exit_code == EXIT_API
    assert result.stdout == ""
    assert result.stderr == (
        "error: you have no voice with id or name 'Nobody' (field voice) [unknown_voice, HTTP 422]\n"
    )


def test_a_wrong_key_exits_1(stack: Stack) -> None:
    result = CliRunner().invoke(
        tome,
        ["--url", stack.url, "--api-key", "not-a-key", "jobs", "list"],
        env={"XDG_CONFIG_HOME": str(stack.config_home), "TOME_URL": None, "TOME_API_KEY": None},
    )
    assert result.exit_code == EXIT_API
    assert "HTTP 401" in result.stderr


def test_the_config_file_gives_the_url_and_key(stack: Stack) -> None:
    (stack.config_home / "tome").mkdir()
    (stack.config_home / "tome" / "config.toml").write_text(
        f'url = "{stack.url}"\napi_key = "{stack.key}"\n', encoding="utf-8"
    )
    result = CliRunner().invoke(
        tome,
        ["jobs", "list", "--json"],
        env={"XDG_CONFIG_HOME": str(stack.config_home), "TOME_URL": None, "TOME_API_KEY": None},
    )
    assert result.exit_code == EXIT_OK, result.output
    assert json.loads(result.stdout) == []


def test_a_wrong_url_exits_3_from_the_installed_command(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    command = Path(sys.executable).parent / "tome"
    env = {"TOME_URL": f"http://127.0.0.1:{port}", "TOME_API_KEY": "k", "XDG_CONFIG_HOME": str(tmp_path)}
    result = subprocess.run(
        [str(command), "jobs", "list"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == EXIT_CONNECTION, result
    assert f"cannot reach http://127.0.0.1:{port}" in result.stderr
    assert result.stdout == ""


def test_ctrl_c_detaches_and_a_cancelled_job_exits_2(
    stack: Stack, tmp_path: Path, reference: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No worker runs, so the job stays queued while the CLI follows it."""
    ref, transcript = reference
    assert stack.run("voices", "add", "narrator", str(ref), "--text", transcript, "--no-wait").exit_code == 0
    script = tmp_path / "note.txt"
    script.write_text("A short note, read aloud.\n", encoding="utf-8")
    monkeypatch.setattr(Polling, "seconds", 0.05)
    real_get_job = Client.get_job

    def interrupted(self: Client, job_id: str) -> dict[str, Any]:
        raise KeyboardInterrupt

    monkeypatch.setattr(Client, "get_job", interrupted)
    detached = stack.run("render", str(script), "--voice", "narrator", "--title", "Note")
    assert detached.exit_code == EXIT_INTERRUPTED
    job_id = detached.stderr.split("job ", 1)[1].split(":", 1)[0]
    assert f"tome jobs download {job_id} --wait" in detached.stderr

    def cancelled_meanwhile(self: Client, job_id: str) -> dict[str, Any]:
        self.cancel_job(job_id)
        return real_get_job(self, job_id)

    monkeypatch.setattr(Client, "get_job", cancelled_meanwhile)
    resumed = stack.run("jobs", "download", job_id, "--wait")
    assert resumed.exit_code == EXIT_FAILED
    assert f"job {job_id} cancelled" in resumed.stderr


def test_ctrl_c_cancels_when_asked_to(
    stack: Stack, tmp_path: Path, reference: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--on-interrupt cancel: the job is cancelled on the server, and the CLI exits 130 saying so."""
    ref, transcript = reference
    assert stack.run("voices", "add", "narrator", str(ref), "--text", transcript, "--no-wait").exit_code == 0
    script = tmp_path / "note.txt"
    script.write_text("A short note, read aloud.\n", encoding="utf-8")
    monkeypatch.setattr(Polling, "seconds", 0.05)

    def interrupted(self: Client, job_id: str) -> dict[str, Any]:
        raise KeyboardInterrupt

    monkeypatch.setattr(Client, "get_job", interrupted)
    result = stack.run("render", str(script), "--voice", "narrator", "--on-interrupt", "cancel")
    monkeypatch.undo()

    assert result.exit_code == EXIT_INTERRUPTED
    job_id = result.stderr.split("job ", 1)[1].split(":", 1)[0]
    assert f"job {job_id} cancelled" in result.stderr
    assert "detached" not in result.stderr
    with Client(stack.url, stack.key) as client:
        assert client.get_job(job_id)["status"] == "cancelled"


def _tome_on_a_terminal(stack: Stack, args: list[str], answer: bytes) -> tuple[int, str]:
    """The installed ``tome`` on a pseudo-terminal: wait for it to follow its job, type Ctrl-C (the
    terminal sends SIGINT, as a person's keyboard does), then ``answer`` the question it asks. Its exit
    code and everything it wrote."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOME_")}
    env.update(TOME_URL=stack.url, TOME_API_KEY=stack.key, XDG_CONFIG_HOME=str(stack.config_home))
    env.update(TERM="xterm", COLUMNS="100")  # a terminal rich draws its live progress bar on
    pid, fd = pty.fork()
    if pid == 0:  # the child: the command line, on the terminal
        # As from a shell: Ctrl-C's SIGINT at its default and not blocked (an ignored or blocked SIGINT
        # would survive the exec, and Ctrl-C would never reach the CLI).
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # a blocked signal survives exec too
        os.execve(str(Path(sys.executable).parent / "tome"), ["tome", *args], env)
    seen = b""
    poller = select.poll()
    poller.register(fd, select.POLLIN)

    def read_until(text: bytes, timeout: float = 180.0) -> None:  # generous: a loaded CI runner is slow
        nonlocal seen
        deadline = time.monotonic() + timeout
        while text not in seen:
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} never came:\n{seen.decode(errors='replace')}")
            if poller.poll(200):  # poll, not select: the test run may hold more than 1,024 descriptors
                try:
                    seen += os.read(fd, 4096)
                except OSError:  # the child has gone and closed the terminal
                    return

    try:
        read_until(b"queued")  # the progress bar is up: the job is being followed
        os.write(fd, b"\x03")
        read_until(b"Cancel job")
        os.write(fd, answer + b"\r")
        read_until(b"\x00")  # to the end of its output: the loop stops at the terminal's close
    finally:
        # The terminal closes a moment before the process ends: give it a few seconds to exit (reaping it),
        # then stop one that is still running (a wait above failed) and reap that.
        deadline = time.monotonic() + 60.0
        reaped, status = os.waitpid(pid, os.WNOHANG)
        while reaped == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
            reaped, status = os.waitpid(pid, os.WNOHANG)
        if reaped == 0:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
        os.close(fd)
    return os.waitstatus_to_exitcode(status), seen.decode(errors="replace")


@pytest.mark.parametrize(("answer", "status"), [(b"y", "cancelled"), (b"n", "queued")])
def test_ctrl_c_on_a_terminal_asks_whether_to_cancel(
    stack: Stack, tmp_path: Path, reference: tuple[Path, str], answer: bytes, status: str
) -> None:
    """No worker runs, so the job stays queued while the CLI follows it."""
    ref, transcript = reference
    assert stack.run("voices", "add", "narrator", str(ref), "--text", transcript, "--no-wait").exit_code == 0
    script = tmp_path / "note.txt"
    script.write_text("A short note, read aloud.\n", encoding="utf-8")

    code, output = _tome_on_a_terminal(stack, ["render", str(script), "--voice", "narrator"], answer)

    assert code == EXIT_INTERRUPTED, output
    job_id = output.split("job ", 1)[1].split(":", 1)[0]
    with Client(stack.url, stack.key) as client:
        assert client.get_job(job_id)["status"] == status
    if status == "queued":
        assert f"tome jobs download {job_id} --wait" in output


@pytest.mark.parametrize(
    ("title", "fmt", "name"),
    [
        ("The Crossing", "mp3", "The_Crossing.mp3"),
        ("../../etc/passwd", "ogg", "etc_passwd.opus"),
        ("...", "wav", "tome-output.wav"),
    ],
)
def test_the_default_file_name_is_safe(title: str, fmt: str, name: str) -> None:
    assert safe_filename(title, EXTENSIONS.get(fmt, fmt)) == name


@pytest.mark.parametrize(
    ("file", "fmt"),
    [
        ("a.md", "markdown"),
        ("b.EPUB", "epub"),
        ("c.ssml", "ssml"),
        ("d.xml", "ssml"),
        ("e.txt", "plain"),
        ("f", "plain"),
    ],
)
def test_the_script_format_comes_from_the_extension(file: str, fmt: str) -> None:
    assert script_format_for(Path(file)) == fmt
