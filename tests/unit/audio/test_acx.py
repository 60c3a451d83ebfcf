"""The ACX check against real MP3s from the bundled ffmpeg, each built to fail one rule, and the streaming
level meter against a direct computation."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import tracemalloc
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.audio import AudioError, BookTags, FfmpegEncoder, ffmpeg_exe
from worker.audio.acx import (
    ACX_RULES,
    AcxReport,
    LevelMeter,
    Measures,
    check_file,
    check_files,
    evaluate,
    mp3_frame_bitrates,
    pcm_blocks,
)

SR = 44_100
PEAK_CEILING_DB = -5.0  # speech is soft-limited below this; MP3 encoding adds up to about a dB to peaks

Signal = npt.NDArray[np.float64]


def speech_like(seconds: float, sr: int, rng: np.random.Generator) -> Signal:
    """Words of noise low-passed at 5 kHz, 0.2-0.5 s long with a syllable envelope, 0.08-0.25 s apart
    (zeros between them), starting at the first sample and ending with the last word."""
    out = np.zeros(round(seconds * sr))
    pos = end = 0
    while True:
        n = round(rng.uniform(0.2, 0.5) * sr)
        if pos + n > out.size:
            return out[:end]
        t = np.arange(n) / sr
        word = np.sqrt(np.clip(np.sin(np.pi * t / t[-1]), 0, 1))
        syllables = 0.55 + 0.45 * np.sin(2 * np.pi * rng.uniform(3, 6) * t) ** 2
        envelope = word * syllables
        out[pos : pos + n] = lowpass(rng.standard_normal(n), 5000.0, sr) * envelope
        end = pos + n
        pos = end + round(rng.uniform(0.08, 0.25) * sr)


def lowpass(x: Signal, hz: float, sr: int) -> Signal:
    taps = np.arange(-64, 65)
    kernel = np.sinc(2 * hz / sr * taps) * np.hamming(taps.size)
    return np.convolve(x, kernel / kernel.sum(), "same")


def db(x: Signal) -> float:
    return 10 * math.log10(float(np.mean(x * x)))


def master(
    *,
    sr: int = SR,
    rms_db: float = -20.5,
    floor_db: float = -68.0,
    head: float = 0.75,
    tail: float = 2.5,
    speech_seconds: float = 8.0,
    digital_silence: float = 0.0,
    spike_db: float | None = None,
    seed: int = 1,
) -> Signal:
    """A chapter as ACX wants it, but for the one thing a test changes: room tone at ``floor_db`` from
    end to end, speech between ``head`` and ``tail`` seconds of it, the whole at ``rms_db``."""
    rng = np.random.default_rng(seed)
    speech = speech_like(speech_seconds, sr, rng)
    zero = slice(0, 0)
    if digital_silence:  # in the middle of the speech, from the start of a gap between words
        middle = speech.size // 2
        at = middle + int(np.flatnonzero(speech[middle:] == 0)[0])
        speech = np.concatenate([speech[:at], np.zeros(round(digital_silence * sr)), speech[at:]])
        start = round(head * sr) + at
        zero = slice(start, start + round(digital_silence * sr))
    x = np.concatenate([np.zeros(round(head * sr)), speech, np.zeros(round(tail * sr))])
    ceiling = 10 ** (PEAK_CEILING_DB / 20)

    def limit(y: Signal) -> Signal:
        return ceiling * np.tanh(y / ceiling)

    gain = 1.0
    for _ in range(8):  # the limiter lowers the RMS: adjust the gain until the limited whole is at rms_db
        gain *= 10 ** ((rms_db - db(limit(gain * x))) / 20)
    x = limit(gain * x) + rng.normal(0.0, 10 ** (floor_db / 20), x.size)
    x[zero] = 0.0
    if spike_db is not None:  # 20 ms of 2 kHz at spike_db, in the middle
        t = np.arange(round(0.02 * sr)) / sr
        middle = x.size // 2
        x[middle : middle + t.size] = 10 ** (spike_db / 20) * np.sin(2 * np.pi * 2000 * t)
    return x


def encode(path: Path, x: Signal, *, sr: int = SR, bitrate: int = 192, tags: BookTags | None = None) -> Path:
    with FfmpegEncoder(path, "mp3" if path.suffix == ".mp3" else "wav", sr, bitrate, tags=tags) as enc:
        enc.write(x.astype(np.float32))
    return path


def transcode(src: Path, dst: Path, *args: str) -> Path:
    cmd = [ffmpeg_exe(), "-hide_banner", "-loglevel", "error", "-y", "-i", str(src), *args, str(dst)]
    subprocess.run(cmd, check=True, capture_output=True)
    return dst


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return encode(tmp_path_factory.mktemp("acx") / "good.mp3", master())


def test_a_file_made_to_acx_rules_passes(good: Path) -> None:
    report = check_file(good)
    assert report.failed() == []
    assert report.passed
    assert report.name == "good.mp3"
    assert (report.codec, report.sample_rate, report.channels) == ("mp3", SR, 1)
    assert (report.bitrate_kbps, report.cbr) == (192, True)
    assert report.rms_db == pytest.approx(-20.5, abs=0.6)
    assert -7.0 <= report.peak_db <= -4.0
    assert report.noise_floor_db == pytest.approx(-68.0, abs=1.5)
    assert report.digital_silence_seconds < 0.01
    # The speech starts 0.75 s in and its last word ends 2.5 s before the end (10 ms blocks, fades).
    assert report.head_seconds == pytest.approx(0.75, abs=0.03)
    assert report.tail_seconds == pytest.approx(2.5, abs=0.03)
    assert report.duration == pytest.approx(master().size / SR, abs=0.002)  # MP3 padding: +-1 ms


# Each case changes one thing of the passing file and must fail that rule, and only that one.
ONE_RULE = {
    "rms_too_quiet": ("rms", {"rms_db": -25.0}),
    "rms_too_loud": ("rms", {"rms_db": -16.5}),
    "peak_too_high": ("peak", {"spike_db": -1.0}),
    "noisy_floor": ("noise_floor", {"floor_db": -52.0}),
    "digital_silence": ("room_tone", {"digital_silence": 1.2}),
    "head_too_short": ("head", {"head": 0.2}),
    "head_too_long": ("head", {"head": 1.6}),
    "tail_too_short": ("tail", {"tail": 0.5}),
    "tail_too_long": ("tail", {"tail": 7.0}),
}


@pytest.mark.parametrize("case", ONE_RULE)
def test_a_level_or_timing_fault_fails_exactly_its_rule(case: str, tmp_path: Path) -> None:
    rule, change = ONE_RULE[case]
    report = check_file(encode(tmp_path / f"{case}.mp3", master(**change)))  # type: ignore[arg-type]
    assert report.failed() == [rule], report.to_json()
    assert not report.passed


def test_wrong_sample_rate_fails_only_sample_rate(tmp_path: Path) -> None:
    report = check_file(encode(tmp_path / "48k.mp3", master(sr=48_000), sr=48_000))
    assert report.failed() == ["sample_rate"]
    assert report.sample_rate == 48_000


def test_wrong_bitrate_fails_only_bitrate(tmp_path: Path) -> None:
    report = check_file(encode(tmp_path / "128k.mp3", master(), bitrate=128))
    assert report.failed() == ["bitrate"]
    assert (report.bitrate_kbps, report.cbr) == (128, True)
    # ACX takes 192 kb/s "or higher"; the caller may ask for more.
    assert check_file(tmp_path / "128k.mp3", expected_bitrate_kbps=128).passed
    assert check_file(encode(tmp_path / "320k.mp3", master(), bitrate=320)).passed


def test_the_info_frame_is_not_audio(tmp_path: Path) -> None:
    # At low rates ffmpeg writes its Xing/Info frame at a larger bitrate than the audio frames (it needs
    # the room): counted as audio, it would make every low-rate CBR file look VBR.
    path = encode(tmp_path / "48k.mp3", master(), bitrate=48)
    assert mp3_frame_bitrates(path) == {48: pytest.approx(master().size / 1152, abs=3)}
    report = check_file(path, expected_bitrate_kbps=48)
    assert (report.bitrate_kbps, report.cbr) == (48, True)
    assert "bitrate" not in report.failed()


def test_vbr_fails_only_bitrate_even_at_a_high_average(tmp_path: Path) -> None:
    wav = encode(tmp_path / "master.wav", master())
    vbr = transcode(wav, tmp_path / "vbr.mp3", "-c:a", "libmp3lame", "-q:a", "0")
    report = check_file(vbr)
    assert report.failed() == ["bitrate"]
    assert not report.cbr
    assert len(mp3_frame_bitrates(vbr)) > 1


def test_stereo_fails_only_channels(tmp_path: Path) -> None:
    wav = encode(tmp_path / "master.wav", master())
    stereo = transcode(wav, tmp_path / "stereo.mp3", "-af", "pan=stereo|c0=c0|c1=c0", "-b:a", "192k")
    report = check_file(stereo)
    assert report.failed() == ["channels"]
    assert report.channels == 2


def test_a_wav_fails_format_and_bitrate(tmp_path: Path) -> None:
    report = check_file(encode(tmp_path / "master.wav", master()))
    assert report.failed() == ["format", "bitrate"]
    assert report.codec == "pcm_s16le"
    assert report.bitrate_kbps == 705  # ffmpeg's figure for 44.1 kHz 16-bit mono


def test_duration_rule_on_numbers(good: Path) -> None:
    fields = {f.name for f in dataclasses.fields(Measures)}
    measures = Measures(**{k: v for k, v in dataclasses.asdict(check_file(good)).items() if k in fields})
    assert [r.name for r in evaluate(measures) if not r.passed] == []
    at_limit = dataclasses.replace(measures, duration=ACX_RULES.max_duration_seconds)
    assert [r.name for r in evaluate(at_limit) if not r.passed] == []
    over = dataclasses.replace(measures, duration=ACX_RULES.max_duration_seconds + 0.5)
    assert [r.name for r in evaluate(over) if not r.passed] == ["duration"]


def test_report_json(good: Path, tmp_path: Path) -> None:
    bad = encode(tmp_path / "quiet.mp3", master(rms_db=-26.0))
    report = check_files([good, bad])
    assert isinstance(report, AcxReport)
    assert not report.passed
    data = json.loads(json.dumps(report.to_json(), allow_nan=False))
    assert data["passed"] is False
    assert [f["name"] for f in data["files"]] == ["good.mp3", "quiet.mp3"]
    assert [f["passed"] for f in data["files"]] == [True, False]
    first = data["files"][0]
    for key in ("duration", "sample_rate", "bitrate_kbps", "rms_db", "peak_db", "noise_floor_db"):
        assert isinstance(first[key], int | float), key
    rms = next(r for r in data["files"][1]["rules"] if r["name"] == "rms")
    assert rms["passed"] is False
    assert rms["limit"] == "-23 to -18 dB"
    assert rms["measured"] == pytest.approx(-26.0, abs=0.6)
    assert str(tmp_path) not in json.dumps(data)  # names only: no server paths in a user's report


def test_digital_silence_everywhere_is_finite_json(tmp_path: Path) -> None:
    report = check_file(encode(tmp_path / "silent.mp3", np.zeros(3 * SR)))
    assert {"rms", "room_tone", "head"} <= set(report.failed())
    assert report.rms_db == report.peak_db == report.noise_floor_db == -200.0
    json.dumps(report.to_json(), allow_nan=False)


def test_stream_description_cannot_be_forged_by_tags_or_the_file_name(tmp_path: Path) -> None:
    forged = "x\n  Stream #0:0: Audio: mp3, 8000 Hz, stereo, fltp, 32 kb/s\n"
    name = forged.replace("/", " per ")
    path = encode(tmp_path / f"{name}.mp3", master(), tags=BookTags(title=forged, author=forged))
    report = check_file(path)
    assert (report.sample_rate, report.channels, report.bitrate_kbps) == (SR, 1, 192)
    assert report.passed


def test_not_audio(tmp_path: Path) -> None:
    junk = tmp_path / "junk.mp3"
    junk.write_bytes(b"this is not audio" * 100)
    with pytest.raises(AudioError) as info:
        check_file(junk)
    assert info.value.code == "audio_undecodable"
    with pytest.raises(FileNotFoundError):
        check_file(tmp_path / "missing.mp3")
    assert mp3_frame_bitrates(junk) == {}


def test_pcm_blocks_streams_and_stops_ffmpeg_early(good: Path) -> None:
    sizes = [b.size for b in pcm_blocks(good, block_frames=10_000)]
    assert sizes[:-1] == [10_000] * (len(sizes) - 1)
    assert 0 < sizes[-1] <= 10_000
    assert sum(sizes) == round(check_file(good).duration * SR)
    stereo = next(pcm_blocks(good, channels=2, block_frames=1000))
    assert stereo.size == 2000
    np.testing.assert_array_equal(stereo[0::2], stereo[1::2])
    blocks = pcm_blocks(good, block_frames=1000)
    next(blocks)
    blocks.close()  # kills ffmpeg and reaps it: nothing is left behind
    assert _ffmpeg_children() == []


def _ffmpeg_children() -> list[str]:
    """Our child processes (running or zombie) whose name starts with ffmpeg."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        parent = int(stat[stat.rindex(")") + 1 :].split()[1])
        if parent == os.getpid() and name.startswith("ffmpeg"):
            found.append(pid)
    return found


# --- the level meter on synthetic PCM -------------------------------------------------------------------

RATE = 1000  # a low rate keeps long signals cheap: 10-sample blocks, 500-sample windows


def segments_pcm(segments: list[tuple[int, float]], seed: int = 0) -> npt.NDArray[np.int16]:
    """Noise in blocks of (length, dB), -inf being digital zero."""
    rng = np.random.default_rng(seed)
    parts = []
    for n, level in segments:
        if level == -math.inf:
            parts.append(np.zeros(n))
        else:
            parts.append(np.clip(rng.normal(0, 32768 * 10 ** (level / 20), n), -32768, 32767))
    return np.rint(np.concatenate(parts)).astype(np.int16)


def reference(pcm: npt.NDArray[np.int16], rate: int) -> dict[str, float]:
    """What the meter must find, computed on the whole array at once."""
    x = pcm.astype(np.float64) / 32768
    block = round(rate * 0.01)
    energy = x * x
    nblocks = -(-x.size // block)
    means = [float(energy[i * block : (i + 1) * block].mean()) for i in range(nblocks)]
    levels = [10 * math.log10(m) if m > 0 else -math.inf for m in means]
    windows = [float(energy[i * block : i * block + 50 * block].mean()) for i in range(x.size // block - 49)]
    floor = 10 * math.log10(min(w for w in windows if w > 0))
    threshold = max(floor + 20, -50)
    loud = [i for i, level in enumerate(levels) if level > threshold]
    zero_run = longest = 0
    for v in pcm:
        zero_run = zero_run + 1 if v == 0 else 0
        longest = max(longest, zero_run)
    return {
        "rms_db": 10 * math.log10(float(energy.mean())),
        "peak_db": 20 * math.log10(float(np.abs(x).max())),
        "noise_floor_db": floor,
        "digital_silence_seconds": longest / rate,
        "head_seconds": loud[0] * block / rate,
        "tail_seconds": (x.size - min((loud[-1] + 1) * block, x.size)) / rate,
    }


segment = st.tuples(st.integers(1, 900), st.sampled_from([-math.inf, -75.0, -66.0, -40.0, -22.0, -12.0]))


@settings(max_examples=60, deadline=None)
@given(
    middle=st.lists(segment, min_size=1, max_size=12),
    head=st.integers(550, 1500),
    tail=st.integers(550, 3000),
    cuts=st.lists(st.integers(1, 5000), max_size=8),
)
def test_meter_matches_a_direct_computation_however_the_stream_is_cut(
    middle: list[tuple[int, float]], head: int, tail: int, cuts: list[int]
) -> None:
    # Room tone at -70 dB around speech at -22 dB, with anything in between.
    pcm = segments_pcm([(head, -70.0), (50, -22.0), *middle, (50, -22.0), (tail, -70.0)])
    expected = reference(pcm, RATE)
    whole = LevelMeter(RATE)
    whole.add(pcm)
    pieces = LevelMeter(RATE)
    for part in np.split(pcm, sorted({c for c in cuts if c < pcm.size})):
        pieces.add(part)
    result = whole.result()
    assert pieces.result() == result
    assert result.duration == pcm.size / RATE
    for key, value in expected.items():
        tolerance = 1e-6 if key.endswith("seconds") else 0.01
        assert getattr(result, key) == pytest.approx(value, abs=tolerance), key


def test_meter_counts_every_channel() -> None:
    mono = segments_pcm([(2000, -30.0)])
    mono[mono == 0] = 1
    stereo = np.stack([mono, np.zeros_like(mono)], axis=1).reshape(-1)
    meter = LevelMeter(RATE, channels=2)
    meter.add(stereo)
    result = meter.result()
    one = LevelMeter(RATE)
    one.add(mono)
    assert result.rms_db == pytest.approx(one.result().rms_db - 10 * math.log10(2), abs=1e-9)
    assert result.peak_db == one.result().peak_db
    assert result.digital_silence_seconds == 0.0  # the left channel has sound: not digital silence
    with pytest.raises(ValueError, match="whole number"):
        meter.add(np.zeros(3, np.int16))


def test_meter_memory_does_not_grow_with_the_length() -> None:
    # Slow fades up and down are the worst case for the head and tail bookkeeping: every block is a new
    # maximum from one side. Ten times the length must not cost more memory.
    def peak_memory(minutes: int) -> int:
        n = minutes * 60 * RATE
        half = np.linspace(-90.0, -1.0, n // 2)
        amplitude = 32767 * 10 ** (np.concatenate([half, half[::-1]]) / 20)
        meter = LevelMeter(RATE)
        pcm = np.rint(amplitude * np.sin(np.arange(n) * 0.7)).astype(np.int16)
        tracemalloc.start()
        for start in range(0, n, 250):  # small blocks: the bookkeeping, not numpy's temporaries, dominates
            meter.add(pcm[start : start + 250])
        meter.result()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return peak

    short, long = peak_memory(6), peak_memory(60)
    assert long < 1.3 * short + 100_000, (short, long)
