"""The checks of a voice's reference recording (worker.qa.reference): each signal check on synthetic and
espeak audio, that noise, tones and music are refused as not speech while speech at any pitch is not, that
wrong transcripts are at most warnings, the speed of the cheap checks, and the transcript check on real
espeak speech."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import soundfile as sf
from scipy.signal import fftconvolve

from tests.support.audio import REFERENCE_TEXT, TRANSCRIPT, pitched_reference, speak
from worker.qa.reference import (
    MIN_TRANSCRIPT_LETTERS_PER_SECOND,
    NOT_SPEECH,
    ReferenceReport,
    active_speech_seconds,
    check_reference,
    check_reference_transcript,
    without,
)
from worker.qa.transcript import PocketsphinxRecogniser, Recogniser, understands
from worker.qa.whisper import WhisperRecogniser

Wave = npt.NDArray[np.float32]


@pytest.fixture(scope="module")
def espeak() -> tuple[Wave, int]:
    wave, rate = speak(TRANSCRIPT)
    return np.asarray(wave, dtype=np.float32), rate


def noise(seconds: float, rate: int, rms: float, seed: int = 7) -> Wave:
    return (np.random.default_rng(seed).standard_normal(int(seconds * rate)) * rms).astype(np.float32)


def tone(seconds: float = 1.5, rate: int = 16_000, hz: float = 180.0, amplitude: float = 0.3) -> Wave:
    t = np.arange(int(seconds * rate)) / rate
    return (amplitude * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def codes(report: ReferenceReport) -> set[str]:
    return {w.code for w in report.warnings}


def speech_rms(wave: Wave) -> float:
    return float(np.sqrt(np.mean(wave[np.abs(wave) > 0.01] ** 2)))


def test_clean_espeak_speech_passes_without_warnings(espeak: tuple[Wave, int]) -> None:
    report = check_reference(*espeak)
    assert report.refusal is None
    assert report.warnings == ()
    assert report.snr_db >= 20.0
    assert report.silence_ratio < 0.5
    assert report.clipped_share == 0.0
    assert -30.0 < report.speech_dbfs < -6.0


@pytest.mark.parametrize(
    ("label", "make"),
    [
        ("digital silence", lambda rate: np.zeros(3 * rate, np.float32)),
        ("hiss at -75 dBFS", lambda rate: noise(3, rate, 10 ** (-75 / 20))),
        (
            "one click in silence",
            lambda rate: np.concatenate(
                [np.zeros(rate, np.float32), np.ones(200, np.float32) * 0.5, np.zeros(rate)]
            ),
        ),
    ],
)
def test_a_silent_recording_is_refused(label: str, make: object) -> None:
    rate = 22_050
    report = check_reference(make(rate), rate)  # type: ignore[operator]
    assert report.refusal is not None, label
    assert report.refusal.code == "reference_unusable"
    assert "silent" in report.refusal.message
    assert report.warnings == ()


def test_clipping_warns_when_audible_and_refuses_when_it_is_most_of_the_signal(
    espeak: tuple[Wave, int],
) -> None:
    wave, rate = espeak
    driven = check_reference(np.clip(wave * 2.0, -1.0, 1.0), rate)
    assert driven.refusal is None
    assert "clipped" in codes(driven)
    assert 0.001 <= driven.clipped_share < 0.1
    crushed = check_reference(np.clip(wave * 10.0, -1.0, 1.0), rate)
    assert crushed.refusal is not None
    assert "clipped" in crushed.refusal.message
    assert crushed.refusal.measured is not None
    assert crushed.refusal.measured >= 0.1


def test_noise_only_is_refused_and_noisy_speech_warns(espeak: tuple[Wave, int]) -> None:
    wave, rate = espeak
    for seed in range(3):
        white = check_reference(noise(5, rate, 0.1, seed), rate)
        assert white.refusal is not None
        assert "noise only" in white.refusal.message
        assert white.refusal.code == NOT_SPEECH
        assert white.snr_db < 3.0
    spectrum = np.fft.rfft(noise(5, rate, 1.0, 11))
    spectrum[1:] /= np.sqrt(np.arange(1, spectrum.size))  # 1/f power: pink noise
    shaped = np.fft.irfft(spectrum)
    pink = check_reference((0.1 * shaped / shaped.std()).astype(np.float32), rate)
    assert pink.refusal is not None
    assert "noise only" in pink.refusal.message
    noisy = check_reference(
        np.clip(wave + noise(wave.size / rate, rate, speech_rms(wave) * 10 ** (-8 / 20)), -1, 1), rate
    )
    assert noisy.refusal is None
    assert "noisy" in codes(noisy)
    assert noisy.snr_db < 20.0
    slight = check_reference(wave + noise(wave.size / rate, rate, speech_rms(wave) * 10 ** (-40 / 20)), rate)
    assert slight.refusal is None
    assert slight.warnings == ()


def test_quiet_speech_warns(espeak: tuple[Wave, int]) -> None:
    wave, rate = espeak
    quiet = check_reference(wave * np.float32(10 ** (-30 / 20)), rate)
    assert quiet.refusal is None
    assert "quiet" in codes(quiet)
    assert quiet.speech_dbfs < -40.0


def test_long_silences_and_dc_offset_warn(espeak: tuple[Wave, int]) -> None:
    wave, rate = espeak
    padded = check_reference(np.concatenate([wave, np.zeros(30 * rate, np.float32)]), rate)
    assert padded.refusal is None
    assert codes(padded) == {"mostly_silence"}
    assert padded.silence_ratio > 0.5
    assert padded.speech_dbfs > -30.0  # the silence does not drag the speech level down
    offset = check_reference(wave + np.float32(0.03), rate)
    assert codes(offset) == {"dc_offset"}
    assert offset.dc_offset == pytest.approx(0.03, abs=0.002)


def in_room(wave: Wave, rate: int, rt60: float, seed: int = 1) -> Wave:
    """``wave`` played in a room whose decay time is ``rt60``: convolved with exponentially decaying noise
    (a diffuse reverberation tail) after the direct sound."""
    t = np.arange(int(rt60 * 1.2 * rate)) / rate
    impulse = np.random.default_rng(seed).standard_normal(t.size) * 10.0 ** (-3.0 * t / rt60)
    impulse[0] = 1.0
    # By FFT: the same full convolution to rounding, in milliseconds where the direct sum over a tail of
    # tens of thousands of samples takes most of a minute.
    wet = fftconvolve(wave.astype(np.float64), impulse / np.sqrt(np.sum(impulse**2)))
    out: Wave = (0.5 * wet / np.max(np.abs(wet))).astype(np.float32)
    return out


def test_an_echoing_room_warns_and_its_decay_time_is_estimated(espeak: tuple[Wave, int]) -> None:
    wave, rate = espeak
    dry = check_reference(wave, rate)
    assert dry.rt60_s is not None
    assert dry.rt60_s < 0.4
    assert "reverberant" not in codes(dry)
    estimates = {}
    for rt60 in (0.3, 1.0, 1.5):
        report = check_reference(in_room(wave, rate, rt60), rate)
        assert report.refusal is None
        assert report.rt60_s is not None
        estimates[rt60] = report.rt60_s
        assert ("reverberant" in codes(report)) == (rt60 > 0.6), report
    assert estimates[0.3] < estimates[1.0] < estimates[1.5]
    assert 0.6 < estimates[1.0] < 1.5


def test_tones_hums_and_sawtooths_are_refused_as_not_speech() -> None:
    """A steady signal that is not noise: no level change, its power in a few frequencies."""
    for wave, rate, why in [
        (tone(), 16_000, "steady tone or hum"),
        (tone(1.0, 8_000, 440.0, 0.9), 8_000, "steady tone or hum"),
        (tone(3.0, 48_000, 50.0, 0.5) + tone(3.0, 48_000, 100.0, 0.2), 48_000, "steady tone or hum"),  # hum
        # 8-bit sawtooth: its harmonics, and the steps of its 8 bits, are notes without a pause
        (np.tile(np.arange(256) / 128.0 - 1.0, 300).astype(np.float32), 8_000, "music"),
    ]:
        report = check_reference(wave, rate)
        assert report.refusal is not None, report
        assert report.refusal.code == NOT_SPEECH
        assert why in report.refusal.message
        assert "force=true" in report.refusal.message


def notes(rate: int, chords: bool, seconds: float = 6.0, seed: int = 3) -> Wave:
    """Music without a voice: a chord (three notes and their octaves) or a single note every half second,
    each struck and decaying, never pausing."""
    rng = np.random.default_rng(seed)
    step = int(0.5 * rate)
    t = np.arange(step) / rate
    envelope = np.minimum(1.0, t / 0.02) * np.exp(-t / 0.6)
    out = []
    for _ in range(int(seconds / 0.5)):
        root = 220.0 * 2 ** (int(rng.integers(0, 12)) / 12)
        pitches = (root, root * 1.26, root * 1.5) if chords else (root,)
        out.append(
            envelope * sum(np.sin(2 * np.pi * f * t) + 0.5 * np.sin(4 * np.pi * f * t) for f in pitches)
        )
    wave = np.concatenate(out)
    music: Wave = (0.3 * wave / np.max(np.abs(wave))).astype(np.float32)
    return music


@pytest.mark.parametrize("rate", [16_000, 44_100])
def test_music_is_refused_as_not_speech_and_speech_at_any_pitch_is_not(rate: int, tmp_path: Path) -> None:
    for chords in (True, False):
        report = check_reference(notes(rate, chords), rate)
        assert report.refusal is not None, report
        assert report.refusal.code == NOT_SPEECH
        assert "music" in report.refusal.message
    for f0 in (70.0, 220.0, 400.0):
        wave, sr = sf.read(pitched_reference(tmp_path, f0, 180.0), dtype="float32")
        report = check_reference(wave, sr)
        assert report.refusal is None, (f0, report)


def test_the_cheap_checks_are_cheap() -> None:
    """120 s at 48 kHz (the largest reference accepted) in well under the time of a request (CPU time: other
    work on the machine does not stretch it)."""
    wave = np.resize(np.clip(speak(TRANSCRIPT)[0] * 2.0, -1.0, 1.0).astype(np.float32), 120 * 48_000)
    check_reference(wave[:48_000], 48_000)
    started = time.process_time()
    report = check_reference(wave, 48_000)
    assert time.process_time() - started < 0.3
    assert report.refusal is None


def test_without_drops_the_named_codes() -> None:
    stored: list[dict[str, Any]] = [
        {"code": "noisy", "message": "m", "measured": 1.0},
        {"code": "transcript_mismatch", "message": "m"},
    ]
    assert without(stored, frozenset({"transcript_mismatch"})) == [stored[0]]


def test_the_embedded_recogniser_hears_english_only_and_a_general_one_any_language() -> None:
    embedded = PocketsphinxRecogniser()
    for language in ("en", "en-GB", "EN-us", None):
        assert understands(embedded, language), language
    for language in ("de", "fr-CA", "zh"):
        assert not understands(embedded, language), language
    assert understands(WhisperRecogniser(Path("/nowhere")), "de")  # no `languages`: any


def test_the_transcript_rules_speech_leaves_out_noisy_pauses_and_padding(espeak: tuple[Wave, int]) -> None:
    """Slow speech with long pauses and padding in room noise at 15 dB SNR: the reference's *sound* counts
    the noise (it is within 30 dB of the speech), the transcript rule's speech does not."""
    wave, rate = espeak
    clean = active_speech_seconds(wave, rate)
    assert clean == pytest.approx(check_reference(wave, rate).sound_s, rel=0.1)  # clean: nearly all its sound
    gap = np.zeros(int(4 * rate), np.float32)
    padded = np.concatenate([gap, wave, gap, wave, gap])
    noisy = padded + noise(padded.size / rate, rate, speech_rms(wave) / 10 ** (15 / 20))
    assert check_reference(noisy, rate).sound_s > 0.9 * noisy.size / rate
    assert active_speech_seconds(noisy, rate) == pytest.approx(2 * clean, rel=0.25)
    assert active_speech_seconds(np.zeros(10, np.float32), rate) == 0.0


@pytest.fixture(scope="module")
def recogniser() -> Recogniser:
    pytest.importorskip("pocketsphinx")
    return PocketsphinxRecogniser()


class TestTranscript:
    def test_the_right_transcript_gives_no_warning(
        self, recogniser: Recogniser, espeak: tuple[Wave, int]
    ) -> None:
        assert check_reference_transcript(recogniser, *espeak, TRANSCRIPT) == ()

    @pytest.mark.parametrize("wpm", [80.0, 450.0])  # espeak's slowest and a fast reader
    def test_the_right_transcript_at_any_pace_is_not_too_short(
        self, recogniser: Recogniser, wpm: float
    ) -> None:
        wave, rate = speak(REFERENCE_TEXT, {"words_per_minute": np.array([wpm], np.float32)})
        assert check_reference_transcript(recogniser, wave, rate, REFERENCE_TEXT) == ()

    @pytest.mark.parametrize("ref_text", ["hello there", "Hello.", "Chapter 1"])
    def test_a_transcript_far_shorter_than_the_speech_warns(
        self, recogniser: Recogniser, ref_text: str
    ) -> None:
        """The recogniser, held to the transcript's words, fits a short one to part of the speech: the
        transcript's letters against the seconds of sound tell."""
        wave, rate = speak(REFERENCE_TEXT)  # 13 words, about 4 s
        [finding] = check_reference_transcript(recogniser, wave, rate, ref_text)
        assert finding.code == "transcript_too_short", finding
        assert finding.measured is not None
        assert 0 < finding.measured < MIN_TRANSCRIPT_LETTERS_PER_SECOND
        assert "ref_text" in finding.message

    def test_a_transcript_in_another_script_is_not_held_to_latin_letters(
        self, recogniser: Recogniser
    ) -> None:
        """A Chinese transcript under the default language: not judged as too short (its characters run
        at other rates), and the word check has no English word to score."""
        wave, rate = speak(REFERENCE_TEXT)
        assert check_reference_transcript(recogniser, wave, rate, "老灯塔看守人每天晚上都爬楼梯") == ()

    @pytest.mark.parametrize(
        "ref_text",
        [
            "hello there",
            "A quick brown fox jumps over the lazy dog and runs into the dark forest beyond the river.",
            "The old lighthouse keeper climbed the stairs every evening.",  # half of what is said
        ],
    )
    def test_a_wrong_transcript_warns(
        self, recogniser: Recogniser, espeak: tuple[Wave, int], ref_text: str
    ) -> None:
        [finding] = check_reference_transcript(recogniser, *espeak, ref_text)
        assert finding.code == "transcript_mismatch"
        assert finding.measured is not None
        assert finding.measured > 1 / 3
        assert "ref_text" in finding.message
        assert "% of the words differ" in finding.message
