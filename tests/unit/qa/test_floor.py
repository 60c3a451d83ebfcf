"""A voice's own floor on the edge and noise checks (worker.qa.checks.VoiceFloor), measured on its
calibration renderings (worker.jobs.quality.calibration), on real espeak audio."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from scipy.signal import lfilter

from worker.engines import SynthesisRequest
from worker.engines.base import SpeakerPrompt
from worker.engines.espeak import EspeakEngine
from worker.jobs import quality
from worker.qa.checks import (
    NoiseFigures,
    QaPolicy,
    VoiceFloor,
    check_audio,
    is_short_line,
    measure_floor,
    noise_figures,
)

SR = EspeakEngine.sample_rate
NOISE_CHECKS = {"edges", "noise", "hiss", "rumble"}
# The prompt espeak's encode_speaker makes of a low voice (95 Hz, 8 semitones) recorded through a
# noisy telephone line (bench/voice_set.py's cal-phone-low): the band and the noise widen the measured
# range, so espeak reads it at its lowest pitch with its widest intonation, dipping into creak.
PHONE_VOICE: SpeakerPrompt = {
    "f0_median_hz": np.asarray([90.2], dtype=np.float32),
    "f0_range_st": np.asarray([7.7], dtype=np.float32),
    "words_per_minute": np.asarray([140.7], dtype=np.float32),
}
BOOK = (
    "Thunder grumbled somewhere to the west, and the fisherman carefully opened the wooden box. "
    "Nobody believed a word of the story, said the priest. On the table lay a jar of honey, a basket "
    "of apples and the broken clock. The wind howled through the chimneys.",
    "The sky was clear and full of stars. At dawn, the schoolteacher walked slowly towards the river "
    "bank, although her brother was uneasy. We should leave before it gets dark, said the stranger.",
    "Why had the mayor hidden the telescope in the empty ballroom? Rain drummed against the windows, "
    "and the children quietly opened a bundle of firewood. Eleanor waited twelve minutes at the bridge.",
)


@pytest.fixture(scope="module")
def phone_floor(engine: EspeakEngine) -> VoiceFloor:
    found = quality.calibration(engine, SynthesisRequest("", PHONE_VOICE, "en", {}, seed=0), "phone-voice")
    assert found is not None
    return found.floor


@pytest.fixture(scope="module")
def book(engine: EspeakEngine) -> list[npt.NDArray[np.float32]]:
    return engine.synthesize([SynthesisRequest(text, PHONE_VOICE) for text in BOOK])


def failed(result: object) -> set[str]:
    return {check.name for check in result.failed}  # type: ignore[attr-defined]


def test_a_telephone_voice_s_creak_is_voice_not_noise(
    book: list[npt.NDArray[np.float32]], phone_floor: VoiceFloor
) -> None:
    """The low telephone voice is read at espeak's lowest pitch and falls into creak at its phrases'
    ends (pulses under the pitch tracker's 50 Hz floor, which it calls unvoiced: 0.3-0.8 s a chunk of
    low, loud, unvoiced sound, as rumble is). Its clean chunks pass the noise checks at the default limits,
    and held to its floor, which its calibration measures under the defaults."""
    for wave, text in zip(book, BOOK, strict=True):
        assert not failed(check_audio(wave, SR, text)) & NOISE_CHECKS, check_audio(wave, SR, text).reasons
        result = check_audio(wave, SR, text, floor=phone_floor)
        assert not failed(result) & NOISE_CHECKS, result.reasons
    assert phone_floor.prose.rumble_s <= QaPolicy().max_rumble_s
    assert phone_floor.prose.noise_s <= QaPolicy().max_noise_s


def _pulses(f0_hz: float, seconds: float, jitter: float, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """Glottal pulses at ``f0_hz`` (each period off by up to ``jitter`` of itself) through three formant
    resonators (500, 1500 and 2500 Hz): a vowel, or at 40 Hz with 15 % jitter a creak."""
    x = np.zeros(int(seconds * SR))
    t = 0.0
    while t < seconds:
        x[int(t * SR)] = 1.0
        t += (1.0 + jitter * rng.uniform(-1.0, 1.0)) / f0_hz
    for formant, bandwidth in ((500.0, 80.0), (1500.0, 120.0), (2500.0, 200.0)):
        r = np.exp(-np.pi * bandwidth / SR)
        x = lfilter([1.0 - r], [1.0, -2.0 * r * np.cos(2 * np.pi * formant / SR), r * r], x)
    return np.asarray(x * 0.05 / np.sqrt(np.mean(x * x)), dtype=np.float64)


def test_creak_under_the_pitch_tracker_s_floor_is_voice_and_brown_noise_is_not() -> None:
    """Between two vowels at 120 Hz, 0.6 s of creak at 38 Hz (under the tracker's 50 Hz floor: no frame
    of it is voiced) measures no noise, while 0.6 s of brown noise at the same level is 0.6 s of rumble
    and of unvoiced sound: the pulses are impulsive, the noise is Gaussian."""
    rng = np.random.default_rng(3)
    vowel = _pulses(120.0, 0.6, 0.01, rng)
    creak = _pulses(38.0, 0.6, 0.15, rng)
    spectrum = np.fft.rfft(rng.standard_normal(creak.size))
    spectrum[1:] /= np.arange(1, spectrum.size)
    spectrum[0] = 0.0
    brown = np.fft.irfft(spectrum, creak.size)
    brown *= 0.05 / np.sqrt(np.mean(brown**2))
    silence = np.zeros(int(0.3 * SR))
    with_creak = noise_figures(np.concatenate((silence, vowel, creak, vowel, silence)), SR)
    with_brown = noise_figures(np.concatenate((silence, vowel, brown, vowel, silence)), SR)
    assert with_creak.rumble_s < 0.1, with_creak
    assert with_creak.noise_s < 0.1, with_creak
    assert with_brown.rumble_s >= 0.5, with_brown
    assert with_brown.noise_s >= 0.5, with_brown
    assert with_creak.edge_s < 0.1  # the creak's pulses are no edge either


def test_noise_is_still_caught_on_a_voice_with_a_high_floor(
    book: list[npt.NDArray[np.float32]], phone_floor: VoiceFloor
) -> None:
    """A second of brown noise inside a chunk of that voice, or before its first word, is longer than
    anything its clean rendering holds (its creak included): it still fails a noise check."""
    wave, text = book[0], BOOK[0]
    level = float(np.sqrt(np.mean(wave.astype(np.float64) ** 2)))
    rng = np.random.default_rng(11)
    spectrum = np.fft.rfft(rng.standard_normal(int(1.2 * SR)))
    spectrum[1:] /= np.arange(1, spectrum.size)
    spectrum[0] = 0.0
    brown = np.fft.irfft(spectrum, int(1.2 * SR))
    burst = (brown / np.sqrt(np.mean(brown**2)) * level).astype(np.float32)
    middle = wave.size // 2
    inside = check_audio(np.concatenate((wave[:middle], burst, wave[middle:])), SR, text, floor=phone_floor)
    assert failed(inside) & NOISE_CHECKS, inside.to_json()
    leading = check_audio(np.concatenate((burst, wave)), SR, text, floor=phone_floor)
    assert "edges" in failed(leading), leading.to_json()


def test_a_clear_voice_keeps_the_default_limits(engine: EspeakEngine) -> None:
    """espeak's default voice measures well under the defaults on its calibration: its floor raises
    nothing, so its chunks are held exactly as before."""
    found = quality.calibration(engine, SynthesisRequest("", {}, "en", {}, seed=0), "default-voice")
    assert found is not None
    assert QaPolicy().for_voice(found.floor, BOOK[0]) == QaPolicy()
    assert QaPolicy().for_voice(found.floor, "Chapter Four") == QaPolicy()


def test_a_short_line_is_held_to_the_figures_of_the_voice_s_headings() -> None:
    prose = NoiseFigures(edge_s=0.2, noise_s=0.9, hiss_s=0.1, rumble_s=0.7)
    lines = NoiseFigures(edge_s=0.8, noise_s=0.2, hiss_s=0.0, rumble_s=0.2)
    floor = VoiceFloor(prose, lines)
    quiet = QaPolicy().for_voice(
        VoiceFloor(NoiseFigures(edge_s=0.6), NoiseFigures(edge_s=0.1)), "Chapter Two"
    )
    assert quiet.max_edge_s == QaPolicy().max_edge_s  # a line is held to the lines' edges only
    policy = QaPolicy(floor_factor=1.5, floor_slack_s=0.1)
    heading = policy.for_voice(floor, "Chapter Seven: The Harbour")
    assert is_short_line("Chapter Seven: The Harbour", policy)
    assert heading.max_edge_s == pytest.approx(1.3)  # 0.8 * 1.5 + 0.1
    assert heading.max_noise_s == policy.max_noise_s  # never lowered
    assert heading.max_rumble_s == pytest.approx(0.4)
    long_text = "One two three four five six seven eight nine ten eleven."
    assert not is_short_line(long_text, policy)
    paragraph = policy.for_voice(floor, long_text)
    assert paragraph.max_edge_s == pytest.approx(1.3)  # its last sentence falls as a heading does
    assert paragraph.max_noise_s == pytest.approx(1.45)
    assert paragraph.max_rumble_s == pytest.approx(1.15)
    assert paragraph.max_hiss_s == pytest.approx(0.25)
    assert policy.for_voice(None, long_text) is policy


def test_measure_floor_takes_the_worst_of_each_kind(engine: EspeakEngine) -> None:
    """The floor is the worst figure over the renderings of each kind; a kind with no rendering takes
    the other's; silence and empty audio measure nothing."""
    texts = ["Chapter Two", BOOK[1], BOOK[2]]
    waves = engine.synthesize([SynthesisRequest(t, PHONE_VOICE) for t in texts])
    figures = [noise_figures(w, SR) for w in waves]
    floor = measure_floor(zip(waves, texts, strict=True), SR)
    assert floor.lines == figures[0]
    assert floor.prose == NoiseFigures.worst(figures[1:])
    assert floor.prose.rumble_s == max(figures[1].rumble_s, figures[2].rumble_s)
    only_prose = measure_floor(zip(waves[1:], texts[1:], strict=True), SR)
    assert only_prose.lines == only_prose.prose
    assert noise_figures(np.zeros(SR, dtype=np.float32), SR) == NoiseFigures()
    assert noise_figures(np.zeros(0, dtype=np.float32), SR) == NoiseFigures()
    assert floor.to_json()["prose"] == floor.prose.to_json()


def test_calibration_is_kept_per_voice_and_none_for_a_neural_engine(engine: EspeakEngine) -> None:
    request = SynthesisRequest("", PHONE_VOICE, "en", {}, seed=0)
    first = quality.calibration(engine, request, "kept-voice")
    assert first is not None
    assert quality.calibration(engine, request, "kept-voice") is first

    class Neural:
        name = "qwen3-tts"
        version = "x"

    assert quality.calibration(Neural(), request, "kept-voice") is None  # type: ignore[arg-type]
