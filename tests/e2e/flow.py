"""The user's path, shared by the end-to-end tests: upload a voice, submit a script, poll, download, check."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from flask import Flask
from flask.testing import FlaskClient
from scipy.signal import fftconvolve
from sqlalchemy import select

from models import Chunk
from tests.api.helpers import submit_job, upload_voice
from tests.support.apps import tome_of
from worker.audio import Pauses, decode_to_pcm, read_wav
from worker.storage.backend import Storage, local_copy

BOOK = """# The Harbour

The fog came in before dawn. Dr. Hale counted 3.5 metres of rope on the quay.

Nobody spoke of the *lighthouse* any more.

# The Storm

By noon the wind had turned. The boats strained at their moorings, and the gulls went quiet.

"Bring them in," said the harbour master. "All of them."

# The Morning After

Everything was calm again.
"""

TERMINAL = {"succeeded", "failed", "cancelled"}


def wait_terminal(
    client: FlaskClient, headers: dict[str, str], job_id: str, timeout: float = 180
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}", headers=headers).json or {}
        if job["status"] in TERMINAL:
            return job
        time.sleep(0.3)
    raise TimeoutError(f"job {job_id} not finished after {timeout} s: {job}")


def submit_book(
    client: FlaskClient, headers: dict[str, str], reference: tuple[bytes, str], fmt: str = "mp3"
) -> dict[str, Any]:
    voice = upload_voice(client, headers, reference[0], name="narrator", ref_text=reference[1])
    assert voice.status_code == 202, voice.json
    response = submit_job(
        client, headers, "narrator", title="The Harbour", script=BOOK, script_format="markdown",
        output={"format": fmt},
    )  # fmt: skip
    assert response.status_code == 202, response.json
    job: dict[str, Any] = response.json
    return job


def _read_chunk(storage: Storage, stored: str) -> tuple[np.ndarray, int]:
    """A chunk's audio through the storage layer (the data directory, or a bucket)."""
    with local_copy(storage, stored) as path:
        return read_wav(path)


def check_output(app: Flask, client: FlaskClient, headers: dict[str, str], job: dict[str, Any]) -> np.ndarray:
    """The audio decodes; its length is the chunks plus their pauses; every chunk is where it belongs."""
    assert job["status"] == "succeeded", job
    download = client.get(job["output"]["url"], headers=headers)
    assert download.status_code == 200
    assert len(download.data) == job["output"]["bytes"]
    partial = client.get(job["output"]["url"], headers={**headers, "Range": "bytes=10-109"})
    assert partial.status_code == 206
    assert partial.data == download.data[10:110]

    state = tome_of(app)
    chunks = state.sessions.scalars(
        select(Chunk).where(Chunk.job_id == uuid.UUID(job["id"])).order_by(Chunk.seq)
    ).all()
    assert [c.seq for c in chunks] == list(range(job["progress"]["chunks_total"]))
    assert all(c.status == "done" and c.audio_path for c in chunks)
    pauses = Pauses()
    pieces = [_read_chunk(state.storage, str(c.audio_path)) for c in chunks]
    rate = pieces[0][1]
    expected = sum(len(p[0]) for p in pieces) / rate + sum(pauses.seconds(c.pause_after) for c in chunks)

    tmp = Path(state.settings.storage.data_dir) / f"download.{job['output']['format']}"
    tmp.write_bytes(download.data)
    decoded = decode_to_pcm(tmp, rate)
    duration = len(decoded) / rate
    # A book joined from chapter files keeps each file's encoder delay and padding between chapters
    # (at most two codec frames, under 100 ms, per chapter); a lossless or one-pass book has none.
    # Below: never shorter than its chunks and pauses, within one sample (the pauses' seconds are summed
    # in floating point: 11.12 against 11.120000000000001 is the same count of samples).
    slack = 0.1 * max(1, len(job["chapters"]))
    assert -1 / rate <= duration - expected < slack, (duration, expected)
    assert abs(job["output"]["duration"] - duration) < 0.05, (job["output"]["duration"], duration)

    # Order and timing, checked by content: each chunk's audio is found where the job's manifest says,
    # within 50 ms.
    files = client.get(f"/v1/jobs/{job['id']}/files", headers=headers).json["files"]
    manifest_url = next(f["url"] for f in files if f["name"] == "manifest.json")
    timeline = client.get(manifest_url, headers=headers).get_json()["chunks"]
    assert [c["seq"] for c in timeline] == [c.seq for c in chunks]
    window = round(0.05 * rate)
    for chunk, placed, (samples, _) in zip(chunks, timeline, pieces, strict=True):
        at = round(placed["start"] * rate)
        best = _best_start(decoded, samples, range(max(0, at - window), at + window + 1, 8))
        best = _best_start(decoded, samples, range(max(0, best - 8), best + 9))
        found = decoded[best : best + len(samples)]
        similarity = _similarity(found, samples)
        assert similarity > 0.9, (
            f"chunk {chunk.seq} is not within 50 ms of its place",
            best - at,
            similarity,
        )
    return decoded


def _similarity(a: np.ndarray, b: np.ndarray) -> float:
    n = min(len(a), len(b))
    a, b = a[:n].astype(np.float64), b[:n].astype(np.float64)
    denominator = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / denominator if denominator else 0.0


def _best_start(decoded: np.ndarray, samples: np.ndarray, starts: range) -> int:
    """The start among ``starts`` at which ``samples`` matches ``decoded`` best (by :func:`_similarity`;
    the first of equals).

    Where ``samples`` fits whole, every start's similarity comes from one FFT cross-correlation and a
    running sum of squares: the same quantity to rounding, without the copies and passes over the chunk
    for each start that cost seconds of CPU a chunk. A start near the end, where the slice is cut short,
    is scored on views of the same float64 copies."""
    length = len(samples)
    first = starts.start
    # Only the stretch of the book the starts reach, as float64 (not a copy of the whole book per call).
    signal = decoded[first : starts[-1] + length].astype(np.float64)
    reference = samples.astype(np.float64)
    last = min(starts.stop, first + len(signal) - length + 1) if length else first  # (an empty chunk: none)
    whole = range(first, last, starts.step)
    scores: list[float] = []
    if whole:
        segment = signal[: whole[-1] - first + length]
        products = fftconvolve(segment, reference[::-1], mode="valid")[:: whole.step]
        energy = np.concatenate(([0.0], np.cumsum(segment**2)))
        window = np.maximum(energy[length:] - energy[:-length], 0.0)[:: whole.step]
        norms = np.sqrt(window) * np.linalg.norm(reference)
        scores = [float(p / n) if n else 0.0 for p, n in zip(products, norms, strict=True)]
    for start in starts[len(whole) :]:
        a = signal[start - first : start - first + length]
        b = reference[: len(a)]
        denominator = float(np.linalg.norm(a) * np.linalg.norm(b))
        scores.append(float(a @ b) / denominator if denominator else 0.0)
    return starts[int(np.argmax(scores))]
