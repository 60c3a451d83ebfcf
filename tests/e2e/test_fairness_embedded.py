"""Fair scheduling on the embedded stack with a real worker: another owner's one-chunk job is not queued
behind a book (the hostile-tenant report: an 800-chunk job delayed it to 13 s, 100 small jobs to 32 s)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask

from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.e2e.flow import wait_terminal
from webapi.cli import mint_key
from worker.config import Settings

pytestmark = pytest.mark.e2e

BOOK_CHUNKS = 2000


def test_a_one_chunk_job_finishes_while_another_owners_book_is_mostly_unrendered(
    app: Flask, settings: Settings, reference_audio: tuple[bytes, str], start_worker: Callable[..., Any]
) -> None:
    client = app.test_client()
    owners = {name: bearer(mint_key(app, owner=name, name="k", admin=False)) for name in ("alice", "bob")}
    for headers in owners.values():
        assert (
            upload_voice(client, headers, reference_audio[0], ref_text=reference_audio[1]).status_code == 202
        )
    start_worker(settings, concurrency=2)
    book = "\n\n".join(f"Paragraph {i} of a long book, read aloud." for i in range(BOOK_CHUNKS))
    big = submit_job(client, owners["alice"], "narrator", script=book, output={"format": "wav"})
    assert big.status_code == 202, big.json
    deadline = time.monotonic() + 120
    while (
        client.get(f"/v1/jobs/{big.json['id']}", headers=owners["alice"]).json["progress"]["chunks_done"] < 16
    ):
        assert time.monotonic() < deadline, "the book never started rendering"
        time.sleep(0.2)
    submitted = time.monotonic()
    small = submit_job(client, owners["bob"], "narrator", script="Just one line.", output={"format": "wav"})
    assert small.status_code == 202
    finished = wait_terminal(client, owners["bob"], small.json["id"], timeout=120)
    latency = time.monotonic() - submitted
    assert finished["status"] == "succeeded"
    progress = client.get(f"/v1/jobs/{big.json['id']}", headers=owners["alice"]).json["progress"]
    done = progress["chunks_done"]
    print(f"fairness: bob's one-chunk job took {latency:.1f} s; alice's book at {done}/{BOOK_CHUNKS}")
    # First come, first served, bob waited for the whole book; shared fairly, for a few render tasks.
    assert progress["chunks_done"] < BOOK_CHUNKS / 4, progress
