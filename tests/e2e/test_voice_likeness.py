"""Rule 7 of the voice cache: the espeak prompt is real. Two reference speakers, rendered through the whole
service (upload, prompt build, job, stitch), give output that follows each speaker's pitch and pace."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.api.helpers import submit_job, upload_voice
from tests.e2e.flow import wait_terminal
from tests.support.audio import TRANSCRIPT, pitched_reference
from worker.audio import read_wav
from worker.config import Settings
from worker.engines.pitch import count_words, f0_statistics, speech_seconds, track_pitch

pytestmark = pytest.mark.e2e

SCRIPT = (
    "Morning light crept across the valley floor. The farmer walked the long road to the market, "
    "carrying baskets of apples and pears, and greeted every neighbour he passed along the way."
)


def _measure(samples: np.ndarray, rate: int, text: str) -> tuple[float, float]:
    stats = f0_statistics(track_pitch(samples, rate))
    assert stats is not None, "no voiced speech found"
    return stats[0], count_words(text) / speech_seconds(samples, rate) * 60.0


def test_two_reference_speakers_give_measurably_different_output(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    settings: Settings,
    tmp_path: Path,
    start_worker: Callable[..., Any],
) -> None:
    start_worker(settings)
    speakers = {"low": (95.0, 140.0), "high": (230.0, 230.0)}
    measured: dict[str, tuple[float, float]] = {}
    for name, (f0, wpm) in speakers.items():
        reference = pitched_reference(tmp_path, f0, wpm)
        ref_f0, ref_wpm = _measure(*read_wav(reference), TRANSCRIPT)
        uploaded = upload_voice(client, user, reference.read_bytes(), name=name, ref_text=TRANSCRIPT)
        assert uploaded.status_code == 202
        job = submit_job(client, user, name, title=name, script=SCRIPT, output={"format": "wav"}).json
        finished = wait_terminal(client, user, job["id"])
        assert finished["status"] == "succeeded", finished
        out = tmp_path / f"{name}.wav"
        out.write_bytes(client.get(finished["output"]["url"], headers=user).data)
        measured[name] = _measure(*read_wav(out), SCRIPT)
        out_f0, out_wpm = measured[name]
        assert abs(out_f0 - ref_f0) / ref_f0 < 0.15, (name, out_f0, ref_f0)
        assert abs(out_wpm - ref_wpm) / ref_wpm < 0.25, (name, out_wpm, ref_wpm)
    assert measured["high"][0] > 1.8 * measured["low"][0]
    assert measured["high"][1] > 1.3 * measured["low"][1]
