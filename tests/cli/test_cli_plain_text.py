"""Every string the server sends reaches the terminal as plain text: hostile titles, voice names,
chapter titles, errors, warnings and QA reasons (escape sequences, OSC titles and hyperlinks, C1 CSI, rich
markup) stored in a real database and read back through the real API by the real ``tome``, with rich
forced to draw for a colour terminal."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from click.testing import Result
from flask import Flask
from sqlalchemy import select, update
from sqlalchemy.orm import Session, scoped_session

from models import Chunk, Job, Voice
from tests.cli.conftest import Stack
from tome_cli.display import plain
from webapi.cli import mint_key

MARKUP = "[link=file:///etc/passwd]x[/link][bold red]B[/bold red]"
OSC_TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"
C1_CSI = "\u009b31m"
HYPERLINK = "\x1b]8;;file:///etc/passwd\x07click\x1b]8;;\x07"
HOSTILE = f"{MARKUP} {OSC_TITLE}{CLEAR}{C1_CSI}"
TERMINAL = {"FORCE_COLOR": "1", "TERM": "xterm-256color", "COLUMNS": "250"}
# What no server string may bring to the terminal: OSC (titles, hyperlinks), BEL, screen clears, C1 CSI.
FORBIDDEN = ("\x1b]", "\x07", CLEAR, "\u009b")


def _shown(result: Result) -> str:
    text = result.stdout + result.stderr
    for sequence in FORBIDDEN:
        assert sequence not in text, (sequence, text)
    return text


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (OSC_TITLE, "\\x1b]0;pwned\\x07"),
        (CLEAR, "\\x1b[2J"),
        (C1_CSI, "\\x9b31m"),
        ("a\u202ebc", "a\\u202ebc"),  # a right-to-left override
        ("line\nbreak\ttab", "line\\x0abreak\\x09tab"),
        (MARKUP, MARKUP),  # markup is left as text: it is never interpreted where plain() output goes
        ("Ünïcødé, fine", "Ünïcødé, fine"),
        (None, ""),
        (42, "42"),
    ],
)
def test_plain_escapes_every_control_character(value: object, shown: str) -> None:
    assert plain(value) == shown


def test_hostile_server_strings_are_printed_as_plain_text(
    app: Flask, db: scoped_session[Session], stack: Stack, tmp_path: Path, reference: tuple[Path, str]
) -> None:
    """No worker runs: the rows are given their hostile strings in the database (where the API would
    refuse some of them), then every command that shows them is run."""
    ref, transcript = reference
    assert stack.run("voices", "add", "narrator", str(ref), "--text", transcript, "--no-wait").exit_code == 0
    script = tmp_path / "note.md"
    script.write_text(
        "# One\n\nA short note, read aloud slowly and with care.\n\n"
        "# Two\n\nAnother note, read the same way.\n",
        encoding="utf-8",
    )
    submitted = stack.run("render", str(script), "--voice", "narrator", "--title", MARKUP, "--no-wait")
    assert submitted.exit_code == 0, submitted.output
    job_id = uuid.UUID(submitted.stdout.strip())
    voice = db.scalars(select(Voice)).one()
    job = db.get(Job, job_id)
    assert job is not None
    chapters = [{**c, "title": f"{c['title']} {HOSTILE}"} for c in job.chapters]
    db.execute(
        update(Voice)
        .where(Voice.id == voice.id)
        .values(
            name=f"nar{OSC_TITLE}rator",
            cache_status="failed",
            cache_error=f"{HYPERLINK} {HOSTILE}",
            warnings=[{"code": f"noisy{CLEAR}", "message": HOSTILE, "measured": 1.0}],
        )
    )
    db.execute(
        update(Job)
        .where(Job.id == job_id)
        .values(title=HOSTILE, status="failed", error=f"{HYPERLINK} {HOSTILE}", chapters=chapters)
    )
    db.execute(
        update(Chunk)
        .where(Chunk.job_id == job_id)
        .values(qa={"passed": False, "renders": 3, "reasons": [HOSTILE], "checks": []}, flagged=True)
    )
    db.commit()
    admin_key = mint_key(app, owner="ops", name="admin", admin=True)
    escaped = "\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m"

    listed = _shown(stack.run("voices", "list", env=TERMINAL))
    assert "nar\\x1b]0;pwned\\x07rator" in listed
    shown_voice = _shown(stack.run("voices", "show", str(voice.id), env=TERMINAL))
    assert f"{MARKUP} {escaped}" in shown_voice
    assert "\\x1b]8;;file:///etc/passwd\\x07click" in shown_voice
    assert "warning: noisy\\x1b[2J" in shown_voice
    jobs = _shown(stack.run("jobs", "list", env=TERMINAL))
    assert MARKUP in jobs
    assert str(job_id) in jobs
    job_shown = _shown(stack.run("jobs", "show", str(job_id), env=TERMINAL))
    assert f"{MARKUP} {escaped}  ({job_id})" in job_shown
    assert f"One {MARKUP}" in job_shown  # a chapter's title
    qa = _shown(stack.run("jobs", "qa", str(job_id), env=TERMINAL))
    assert MARKUP in qa
    followed = stack.run("jobs", "download", str(job_id), "--wait", env=TERMINAL)
    assert followed.exit_code == 2
    assert "failed: \\x1b]8;;file:///etc/passwd\\x07click" in _shown(followed)
    caches = _shown(stack.run("admin", "caches", key=admin_key, env=TERMINAL))
    assert "nar\\x1b]0;pwned\\x07rator" in caches
    assert "FLAGGED" in qa
    # --json keeps every character, escaped by JSON itself
    raw = stack.run("jobs", "show", str(job_id), "--json", env=TERMINAL)
    assert json.loads(_shown(raw))["title"] == HOSTILE
