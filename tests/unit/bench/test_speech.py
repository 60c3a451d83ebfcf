"""bench/speech.py on one voice and two warm requests through the real stack: its figures must agree with
each other and with the voice cache's counters, and its report must say whether the target was met."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.speech import SpeechTimings, Timed, run_speech_bench

pytestmark = pytest.mark.e2e


def test_a_small_run_times_every_request_and_builds_each_voice_once(tmp_path: Path) -> None:
    problems, lines, summary = run_speech_bench(tmp_path, voices=1, requests=2)

    assert problems == []
    assert "builds=1/1" in summary
    assert any(line.strip().startswith("target") for line in lines)
    assert any("1 prompt builds for 1 voices" in line for line in lines)


def test_the_report_reads_its_own_figures() -> None:
    timings = SpeechTimings(
        cold=[Timed(2.0, 2.5, 100)], warm=[Timed(0.2, 0.4, 100), Timed(0.6, 0.8, 100)], builds=1, voices=1
    )
    lines = timings.lines()

    assert "median   400.0 ms" in next(line for line in lines if "warm: first byte" in line)
    assert "cold / warm first byte = 5.0x" in next(line for line in lines if "ratio" in line)
    assert lines[-2].endswith(": met")
    slow = SpeechTimings(cold=[Timed(2.0, 2.5, 1)], warm=[Timed(0.7, 0.9, 1)], builds=1, voices=1)
    assert slow.lines()[-2].endswith("NOT met")
    assert slow.summary() == "speech ttfb warm=700ms cold=2000ms builds=1/1"
