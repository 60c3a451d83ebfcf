"""Chunk loudness figures (worker.audio.loudness) on synthesised signals with known levels."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyloudnorm
import pytest
from scipy.signal import lfilter, resample_poly

from worker.audio.dsp import apply_fades
from worker.audio.loudness import Levels, measure, oversampled_peak, true_peak_envelope

SR = 24_000
BS1770_997HZ_MINUS_20_DBFS = -23.01  # BS.1770: a 0 dBFS 997 Hz sine in one channel reads -3.01 LKFS

Signal = npt.NDArray[np.float32]


def sine(seconds: float, hz: float, amplitude: float, sr: int = SR, phase: float = 0.0) -> Signal:
    t = np.arange(round(seconds * sr)) / sr
    return (amplitude * np.sin(2 * np.pi * hz * t + phase)).astype(np.float32)


def speech_like(seconds: float, seed: int, peak: float = 0.5, bed_db: float | None = None) -> Signal:
    """Syllable-sized bursts (a 110-140 Hz harmonic buzz plus coloured noise, under Hann envelopes)
    grouped into words separated by gaps, scaled to ``peak``; optionally a white noise bed at ``bed_db``
    RMS under everything."""
    rng = np.random.default_rng(seed)
    n = round(seconds * SR)
    t = np.arange(n) / SR
    f0 = rng.uniform(110, 140) * (1 + 0.05 * np.sin(2 * np.pi * 0.7 * t))
    phase = 2 * np.pi * np.cumsum(f0) / SR
    buzz = sum(np.sin(k * phase) / k for k in range(1, 9))
    hiss = lfilter([1.0], [1.0, -0.8], rng.standard_normal(n))
    carrier = 0.7 * buzz / np.max(np.abs(buzz)) + 0.3 * hiss / np.max(np.abs(hiss))
    envelope = np.zeros(n)
    pos = round(0.05 * SR)
    while pos < n:
        for _ in range(int(rng.integers(1, 4))):  # a word: 1-3 syllables
            if pos >= n:
                break
            length = round(rng.uniform(0.12, 0.25) * SR)
            stop = min(n, pos + length)
            envelope[pos:stop] += rng.uniform(0.3, 1.0) * np.hanning(length)[: stop - pos]
            pos += round(length * 0.8)
        pos += round(rng.uniform(0.1, 0.3) * SR)  # the gap between words
    x: npt.NDArray[np.float64] = envelope * carrier * (peak / np.max(np.abs(envelope * carrier)))
    if bed_db is not None:
        x = x + 10 ** (bed_db / 20) * rng.standard_normal(n)
    return x.astype(np.float32)


def full_true_peak(x: npt.NDArray[np.floating]) -> float:
    x64 = np.asarray(x, dtype=np.float64)
    return float(max(np.max(np.abs(x64)), np.max(np.abs(resample_poly(x64, 4, 1)))))


# -- loudness ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("sr", [48_000, 44_100, 24_000, 22_050])
def test_997hz_sine_reads_the_bs1770_reference(sr: int) -> None:
    x = sine(10.0, 997.0, 0.1, sr)  # -20 dBFS peak

    levels = measure(x, sr)

    assert levels.lufs is not None
    assert levels.lufs == pytest.approx(BS1770_997HZ_MINUS_20_DBFS, abs=0.1)
    assert levels.lufs == pytest.approx(pyloudnorm.Meter(sr).integrated_loudness(x.astype(np.float64)))


def test_loudness_follows_gain_and_differs_between_signals() -> None:
    x = speech_like(6.0, seed=1)
    quiet = measure(x * np.float32(10 ** (-7.5 / 20)), SR).lufs
    loud = measure(x, SR).lufs
    other = measure(speech_like(6.0, seed=2, peak=0.2), SR).lufs
    assert loud is not None
    assert quiet is not None
    assert other is not None
    assert loud - quiet == pytest.approx(7.5, abs=0.01)
    assert abs(other - loud) > 3.0


def test_short_chunk_is_one_block_as_long_as_itself() -> None:
    steady = measure(sine(10.0, 1000.0, 0.1), SR).lufs
    assert steady is not None
    for seconds in (0.1, 0.2, 0.399):
        short = measure(sine(seconds, 1000.0, 0.1), SR).lufs
        assert short is not None, seconds
        assert short == pytest.approx(steady, abs=0.15), seconds
    gated_standard = measure(sine(0.4, 1000.0, 0.1), SR).lufs
    assert gated_standard == pytest.approx(steady, abs=0.15)
    assert measure(sine(0.099, 1000.0, 0.1), SR).lufs is None  # a click, not speech to level


def test_silence_and_gated_out_signals_have_no_loudness() -> None:
    zeros = measure(np.zeros(SR, np.float32), SR)
    assert zeros == Levels(None, None, None, None, None, SR, 0.0)
    empty = measure(np.zeros(0, np.float32), SR)
    assert empty.samples == 0
    assert empty.energy == 0.0
    assert empty.rms_db is None
    very_quiet = measure(sine(2.0, 1000.0, 10 ** (-80 / 20)), SR)
    assert very_quiet.lufs is None  # under BS.1770's -70 LUFS absolute gate
    assert very_quiet.rms_db == pytest.approx(-83.01, abs=0.01)


# -- RMS, peaks, energy ------------------------------------------------------------------------------


@pytest.mark.parametrize("amplitude", [1.0, 0.5, 0.01])
def test_rms_and_peak_of_a_sine(amplitude: float) -> None:
    x = sine(1.0, 250.0, amplitude, phase=np.pi / 2)  # 96 samples a period: every crest is a sample
    levels = measure(x, SR)
    expected = 20 * math.log10(amplitude)
    assert levels.rms_db == pytest.approx(expected - 3.0103, abs=0.001)
    assert levels.peak_db == pytest.approx(expected, abs=0.001)
    assert levels.samples == x.size
    assert levels.energy == pytest.approx(float(np.sum(x.astype(np.float64) ** 2)), rel=1e-9)
    # Faded in and out as chunks are: a signal that starts at full scale is a step, whose reconstruction
    # does overshoot (by about 1 dB here).
    assert measure(apply_fades(x, SR), SR).true_peak_db == pytest.approx(expected, abs=0.01)
    assert levels.true_peak_db is not None
    assert levels.true_peak_db > expected + 0.5


def test_rms_of_square_wave_and_noise() -> None:
    square = np.where(np.arange(SR) % 40 < 20, 0.25, -0.25).astype(np.float32)
    assert measure(square, SR).rms_db == pytest.approx(20 * math.log10(0.25), abs=1e-6)
    noise = (0.05 * np.random.default_rng(3).standard_normal(5 * SR)).astype(np.float32)
    assert measure(noise, SR).rms_db == pytest.approx(20 * math.log10(0.05), abs=0.05)


def test_energy_predicts_rms_of_concatenation() -> None:
    parts = [speech_like(2.0, seed=s, peak=p) for s, p in ((1, 0.5), (2, 0.1), (3, 0.9))]
    levels = [measure(p, SR) for p in parts]
    whole = measure(np.concatenate(parts), SR)
    rms = 10 * math.log10(sum(lv.energy for lv in levels) / sum(lv.samples for lv in levels))
    assert whole.rms_db == pytest.approx(rms, abs=1e-9)


def test_true_peak_finds_the_intersample_peak() -> None:
    # fs/4 at 45 degrees: every sample is at +-A/sqrt(2), the waveform reaches A between them.
    x = apply_fades(sine(1.0, SR / 4, 0.5, phase=np.pi / 4), SR)
    levels = measure(x, SR)
    assert levels.peak_db == pytest.approx(20 * math.log10(0.5) - 3.0103, abs=0.001)
    assert levels.true_peak_db == pytest.approx(20 * math.log10(0.5), abs=0.05)
    assert levels.peak_db is not None
    assert levels.true_peak_db is not None
    assert levels.true_peak_db > levels.peak_db + 2.9


@pytest.mark.parametrize("seed", range(4))
def test_true_peak_equals_oversampling_the_whole_signal(seed: int) -> None:
    # Only the blocks that can reach the peak are oversampled: the result must not differ.
    rng = np.random.default_rng(seed)
    x = speech_like(3.0, seed=seed, peak=0.8)
    x[rng.integers(0, x.size, 5)] = rng.uniform(-0.9, 0.9, 5)  # isolated spikes: inter-sample overshoot
    expected = full_true_peak(x)
    assert oversampled_peak(x.astype(np.float64)) == pytest.approx(expected, rel=1e-12)
    assert measure(x, SR).true_peak_db == pytest.approx(20 * math.log10(expected), abs=1e-9)


@pytest.mark.parametrize("fraction", [0.2, 0.5, 0.9])
def test_envelope_equals_oversampling_the_whole_signal(fraction: float) -> None:
    # Wherever an oversampled point can reach the threshold, the envelope has the exact value, also at
    # the edges of the oversampled runs (many of them at a low threshold).
    x = speech_like(3.0, seed=11, peak=0.8).astype(np.float64)
    threshold = fraction * float(np.max(np.abs(x)))
    full = np.abs(resample_poly(x, 4, 1)).reshape(-1, 4).max(axis=1)

    envelope = true_peak_envelope(x, threshold)

    reaching = full >= threshold
    assert reaching.any()
    np.testing.assert_allclose(envelope[reaching], full[reaching], rtol=1e-12)
    computed = envelope > 0
    np.testing.assert_allclose(envelope[computed], full[computed], rtol=1e-12)


# -- noise floor -------------------------------------------------------------------------------------


@pytest.mark.parametrize("bed_db", [-70.0, -60.0, -45.0])
def test_floor_reads_the_noise_bed_between_words(bed_db: float) -> None:
    x = speech_like(8.0, seed=5, peak=0.5, bed_db=bed_db)
    levels = measure(x, SR)
    assert levels.floor_db == pytest.approx(bed_db, abs=1.0)
    assert levels.rms_db is not None
    assert levels.rms_db > bed_db + 15


def test_floor_of_digital_silence_between_words_is_none() -> None:
    assert measure(speech_like(4.0, seed=6), SR).floor_db is None
    assert measure(sine(0.02, 1000.0, 0.1), SR).floor_db == pytest.approx(-23.0, abs=0.3)  # one window
    assert measure(sine(2.0, 1000.0, 0.1), SR).floor_db == pytest.approx(-23.01, abs=0.01)


# -- input checks and JSON ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "match"),
    [(np.nan, "NaN"), (np.inf, "infinite"), (-np.inf, "infinite")],
)
def test_rejects_non_finite_samples(bad: float, match: str) -> None:
    x = sine(1.0, 440.0, 0.5)
    x[100] = bad
    with pytest.raises(ValueError, match=match):
        measure(x, SR)


def test_rejects_bad_shapes_types_and_rates() -> None:
    with pytest.raises(ValueError, match="1-D"):
        measure(np.zeros((10, 2), np.float32), SR)
    with pytest.raises(ValueError, match="floating"):
        measure(np.zeros(10, np.int16), SR)
    with pytest.raises(ValueError, match="sample_rate"):
        measure(np.zeros(10, np.float32), 0)


def test_levels_round_trip_through_json() -> None:
    for levels in (
        measure(speech_like(3.0, seed=7, bed_db=-62.0), SR),
        measure(speech_like(3.0, seed=7), SR),  # floor None
        measure(np.zeros(100, np.float32), SR),  # everything None
    ):
        back = Levels.from_json(json.loads(json.dumps(levels.to_json())))
        assert back == levels


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"lufs": "loud"}, "lufs"),
        ({"rms_db": float("nan")}, "rms_db"),
        ({"peak_db": float("inf")}, "peak_db"),
        ({"true_peak_db": True}, "true_peak_db"),
        ({"samples": 1.5}, "samples"),
        ({"samples": True}, "samples"),
        ({"samples": -1}, "samples"),
        ({"energy": None}, "energy"),
        ({"energy": -1.0}, "energy"),
        ({"extra": 1}, "extra"),
    ],
)
def test_from_json_is_strict(change: dict[str, object], match: str) -> None:
    data: dict[str, object] = dict(measure(speech_like(1.0, seed=8), SR).to_json())
    data.update(change)
    with pytest.raises(ValueError, match=match):
        Levels.from_json(data)


def test_from_json_refuses_missing_fields_and_non_objects() -> None:
    data = dict(measure(speech_like(1.0, seed=8), SR).to_json())
    del data["floor_db"]
    with pytest.raises(ValueError, match="floor_db"):
        Levels.from_json(data)
    with pytest.raises(ValueError, match="object"):
        Levels.from_json([1, 2])  # type: ignore[arg-type]


def test_measure_is_cheap() -> None:
    x = speech_like(20.0, seed=9, peak=0.7, bed_db=-65.0)
    best = math.inf
    for _ in range(5):
        start = time.process_time()
        measure(x, SR)
        best = min(best, time.process_time() - start)
    # CPU time, not wall time: other work on the machine does not stretch it
    assert best < 0.1  # about 17 ms on the development machine (2 cores)


# What a gunicorn worker and a Celery worker do as they start (build the app, import the task modules),
# then load_numerics; the modules of NUMERICS each left loaded, as JSON on the last line.
STARTS = (
    "import json, sys\n"
    "import webapi, worker.tasks\n"
    "from worker.audio.loudness import load_numerics\n"
    "webapi.create_app()\n"
    "NUMERICS = ('pyloudnorm', 'scipy')\n"
    "started = [m for m in NUMERICS if m in sys.modules]\n"
    "load_numerics()\n"
    "print(json.dumps([started, [m for m in NUMERICS if m in sys.modules]]))\n"
)


def test_processes_import_the_numerics_on_first_use_or_when_asked(tmp_path: Path) -> None:
    """The API and the task modules leave pyloudnorm and SciPy (about a second of CPU) to their first use,
    so that a process that never measures audio does not pay for them; ``load_numerics`` imports them (a
    worker calls it before its pool forks, see worker.tasks)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOME_")}
    env |= {"TOME_DATA_DIR": str(tmp_path / "var"), "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    done = subprocess.run(
        [sys.executable, "-c", STARTS], check=False, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    started, loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert started == []
    assert loaded == ["pyloudnorm", "scipy"]
