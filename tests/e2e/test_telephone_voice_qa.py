"""A voice enrolled from a telephone-band recording renders a book with no clean chunk flagged: its
creak (espeak reads it at its lowest pitch) counts as voice, not rumble, and the edge and noise checks
hold its chunks to its own floor (worker.qa.checks.VoiceFloor), measured on its calibration renderings
in the worker. A real worker process, the embedded defaults, espeak."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from bench.voice_set import REFERENCE_TEXT, VoiceSpec, reference_of
from tests.api.helpers import submit_job, upload_voice
from tests.e2e.flow import wait_terminal
from worker.audio import write_wav_atomic
from worker.config import Settings

pytestmark = pytest.mark.e2e

# A low voice with a lively intonation, recorded at 8 kHz through a 300-3400 Hz line in a room with
# pink noise 25 dB under the speech: espeak reads it at its lowest pitch with a wide intonation, which
# falls into creak (pulses under the pitch tracker's floor) at its phrases' ends.
PHONE = VoiceSpec("phone", "held-out", 95.0, 8.0, 150.0, "phone", "pink", 25.0, 0.0, -18.0)
STORY = """# Chapter One: The Lighthouse

The lighthouse stood on a rock a mile from the shore, and for forty years the same family had kept its \
lamp burning. Every evening the keeper climbed the one hundred and twelve steps, wound the clockwork that \
turned the lens, and wrote the state of the sea in a book bound in green leather.

Nobody in the village could remember a night when the light had failed. Even in the great storm, when \
the waves broke over the gallery and the windows of the lantern cracked, the beam went round.

# Chapter Two: The Letter

One morning in March a boat brought a letter with a government seal. The keeper read it twice at the \
kitchen table, folded it, and put it behind the clock on the mantelpiece without a word.

His daughter found it there a week later. The light was to be made automatic, it said, and the family \
would be given a cottage in the town, with a small pension and the thanks of the service.

# Chapter Three: The Last Night

On the last night the whole village rowed out to the rock. They brought bread, cheese and a barrel of \
cider, and they sat on the steps of the tower while the keeper lit the lamp for the final time.

When the beam swept over the water, somebody began to sing, and one by one the others joined in, until \
the song carried all the way back to the harbour."""


def test_a_telephone_voice_renders_a_book_with_no_chunk_flagged(
    client: FlaskClient,
    user: dict[str, str],
    settings: Settings,
    start_worker: Callable[..., Any],
    tmp_path: Path,
) -> None:
    audio, rate = reference_of(PHONE)
    assert rate == 8000
    path = tmp_path / "phone.wav"
    write_wav_atomic(path, audio, rate)
    voice = upload_voice(client, user, path.read_bytes(), name="caller", ref_text=REFERENCE_TEXT)
    assert voice.status_code == 202, voice.json
    start_worker(settings, concurrency=2)
    response = submit_job(
        client, user, "caller", title="The Lighthouse", script=STORY, script_format="markdown",
        output={"format": "wav"},
    )  # fmt: skip
    assert response.status_code == 202, response.json
    job = wait_terminal(client, user, response.json["id"], timeout=300)
    assert job["status"] == "succeeded", job["error"]
    assert [c["title"] for c in job["chapters"]] == [
        "Chapter One: The Lighthouse",
        "Chapter Two: The Letter",
        "Chapter Three: The Last Night",
    ]
    report = client.get(job["qa"]["url"], headers=user).json
    chunks = report["chunks"]
    assert len(chunks) >= 9
    failing = {c["seq"]: [k for k in c["checks"] if not k["passed"]] for c in chunks if not c["passed"]}
    assert not failing, failing
    assert job["qa"]["chunks_flagged"] == 0
    assert job["qa"]["chunks_rerendered"] == 0
    assert all(c["renders"] == 1 for c in chunks)
    rumble = [k for c in chunks for k in c["checks"] if k["name"] == "rumble"]
    assert len(rumble) == len(chunks)
    assert all(k["passed"] for k in rumble), rumble
