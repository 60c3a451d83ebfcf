"""The ACX check: is an encoded file what ACX (Audible) accepts? Measured on the file itself.

Each file is decoded back with the bundled ffmpeg and streamed through :class:`LevelMeter` in blocks, so
memory does not grow with the file's length; the container facts come from ffmpeg's description of the
input and, for MP3, from the frame headers. Levels are measured on the decoded 16-bit PCM, as a 16-bit
master would be, and reported as the Audacity ACX Check plugin reports them: RMS over the whole file,
peak, the noise floor (the quietest 500 ms window that is not digital zero), room tone (no 500 ms of
digital silence, which ACX rejects), head and tail (room tone before the first and after the last block
of speech), sample rate, channels, format and bitrate (every MP3 frame header, so a VBR file is told from
a CBR one).

See docs/api.md, "The ACX preset" (how each figure is measured, and its bounds).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import threading
from collections.abc import Generator, Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from worker.audio.binary import ffmpeg_exe
from worker.audio.errors import AudioError
from worker.audio.ffmpeg import STDERR_TAIL_BYTES, TailDrainer, decode_command
from worker.audio.pcm import PCM16_SCALE, Pcm16

__all__ = [
    "ACX_RULES",
    "AcxFileReport",
    "AcxReport",
    "AcxRules",
    "LevelMeter",
    "Levels",
    "Measures",
    "RuleResult",
    "check_file",
    "check_files",
    "evaluate",
    "mp3_frame_bitrates",
    "pcm_blocks",
]


@dataclass(frozen=True)
class AcxRules:
    """ACX's audio submission requirements (levels in dB, times in seconds; bounds are inclusive)."""

    rms_min_db: float = -23.0
    rms_max_db: float = -18.0
    peak_max_db: float = -3.0
    noise_floor_max_db: float = -60.0
    max_digital_silence_seconds: float = 0.5  # no window this long may be digital zero
    sample_rate: int = 44_100
    channels: int = 1
    codec: str = "mp3"
    min_bitrate_kbps: int = 192  # "192 kbps or higher MP3, constant bit rate"
    head_min_seconds: float = 0.5
    head_max_seconds: float = 1.0
    tail_min_seconds: float = 1.0
    tail_max_seconds: float = 5.0
    max_duration_seconds: float = 120 * 60.0


ACX_RULES = AcxRules()
"""The rules as ACX publishes them."""

BLOCK_SECONDS = 0.01
"""The short-term level's block (and the step between noise-floor windows)."""

FLOOR_WINDOW_BLOCKS = 50
"""Blocks in a noise-floor window: 500 ms."""

SPEECH_ABOVE_FLOOR_DB = 20.0
"""A block is speech (for head and tail) when its level is this far above the noise floor..."""

SPEECH_MIN_DB = -50.0
"""...and above this absolute level."""

SILENCE_DB = -200.0
"""The level reported for digital silence (instead of -inf, so that reports stay finite JSON)."""

_LEVEL_STEP = 10  # levels of 10 ms blocks are kept in tenths of a dB for the head and tail search
_QUIET = -1_000_000  # the quantised level of a block of digital zero
_SLICE_FRAMES = 1 << 16  # LevelMeter.add works in slices of this size: exact sums, bounded temporaries


@dataclass(frozen=True)
class Levels:
    """What :class:`LevelMeter` measured (see the module's docstring for the definitions)."""

    duration: float
    rms_db: float
    peak_db: float
    noise_floor_db: float
    digital_silence_seconds: float  # the longest run of digital zero
    head_seconds: float
    tail_seconds: float


class LevelMeter:
    """Streaming level statistics of interleaved 16-bit PCM, in memory that does not grow with its length.

    Feed it with :meth:`add` in blocks of any size (the result does not depend on how the stream is cut)
    and read :meth:`result` at the end. Besides a few numbers it keeps the last 500 ms of block energies
    and, for the head and tail, the blocks that set a new maximum level from the start and from the end
    so far (levels in tenths of a dB: at most a few thousand entries, whatever the length).
    """

    def __init__(self, sample_rate: int, channels: int = 1) -> None:
        if sample_rate <= 0 or channels <= 0:
            raise ValueError(f"sample_rate and channels must be positive, got {sample_rate}, {channels}")
        self.sample_rate = sample_rate
        self.channels = channels
        self.block = max(1, round(sample_rate * BLOCK_SECONDS))
        self.frames = 0
        self._sum_squares = 0.0
        self._peak = 0
        self._zero_run = 0  # frames of digital zero at the end of what was added
        self._longest_zero_run = 0
        self._pending = np.zeros(0, np.int64)  # frame energies of the incomplete block at the end
        self._blocks = 0  # complete blocks seen
        self._recent = np.zeros(0, np.float64)  # energies of the last FLOOR_WINDOW_BLOCKS - 1 blocks
        self._floor_energy: float | None = None  # the quietest window that is not digital zero
        self._rises: list[tuple[int, int]] = []  # (block, level): each louder than every block before
        self._falls: list[tuple[int, int]] = []  # (block, level): each louder than every block after

    def add(self, pcm: Pcm16) -> None:
        """Append interleaved samples (a whole number of frames)."""
        data = np.asarray(pcm)
        if data.ndim != 1 or data.dtype != np.int16 or data.size % self.channels:
            raise ValueError("pcm must be 1-D int16 holding a whole number of interleaved frames")
        frames = data.reshape(-1, self.channels)
        for start in range(0, frames.shape[0], _SLICE_FRAMES):
            self._add_frames(frames[start : start + _SLICE_FRAMES].astype(np.int64))

    def _add_frames(self, x: npt.NDArray[np.int64]) -> None:
        n = x.shape[0]
        energy = (x * x).sum(axis=1)  # per frame, summed over the channels; exact integers
        self.frames += n
        self._sum_squares += float(energy.sum())
        self._peak = max(self._peak, int(np.abs(x).max()))
        loud = np.flatnonzero(energy)
        if loud.size == 0:
            self._zero_run += n
        else:
            inner = int((np.diff(loud) - 1).max()) if loud.size > 1 else 0
            self._longest_zero_run = max(self._longest_zero_run, self._zero_run + int(loud[0]), inner)
            self._zero_run = n - 1 - int(loud[-1])
        self._longest_zero_run = max(self._longest_zero_run, self._zero_run)

        energy = np.concatenate([self._pending, energy])
        count = energy.size // self.block
        self._pending = energy[count * self.block :].copy()
        if count == 0:
            return
        blocks = energy[: count * self.block].reshape(count, self.block).sum(axis=1).astype(np.float64)
        self._track_floor(blocks)
        self._track_speech(self._quantise(blocks, self.block), self._blocks)
        self._blocks += count

    def _track_floor(self, blocks: npt.NDArray[np.float64]) -> None:
        energies = np.concatenate([self._recent, blocks])
        w = FLOOR_WINDOW_BLOCKS
        if energies.size >= w:
            sums = np.concatenate([[0.0], np.cumsum(energies)])
            windows = sums[w:] - sums[:-w]  # exact: integers far below 2**53
            windows = windows[windows > 0]  # a window of digital zero is not room tone
            if windows.size:
                low = float(windows.min())
                if self._floor_energy is None or low < self._floor_energy:
                    self._floor_energy = low
        self._recent = energies[-(w - 1) :].copy()

    def _quantise(self, energies: npt.NDArray[np.float64], frames: int) -> npt.NDArray[np.int64]:
        mean = energies / (frames * self.channels * PCM16_SCALE**2)
        with np.errstate(divide="ignore"):
            tenths = np.floor(10.0 * _LEVEL_STEP * np.log10(mean))
        return np.where(energies > 0, tenths, _QUIET).astype(np.int64)

    def _track_speech(self, levels: npt.NDArray[np.int64], first: int) -> None:
        best = self._rises[-1][1] if self._rises else _QUIET - 1
        before = np.maximum.accumulate(np.concatenate([[best], levels]))[:-1]
        self._rises += [(first + int(i), int(levels[i])) for i in np.flatnonzero(levels > before)]
        after = np.concatenate([np.maximum.accumulate(levels[::-1])[::-1][1:], [_QUIET - 1]])
        top = int(levels.max())
        while self._falls and self._falls[-1][1] <= top:
            self._falls.pop()
        self._falls += [(first + int(i), int(levels[i])) for i in np.flatnonzero(levels > after)]

    def result(self) -> Levels:
        """The levels of everything added so far (the meter can go on taking samples)."""
        rises, falls = list(self._rises), list(self._falls)
        if self._pending.size:  # the last, incomplete block counts for the head and tail
            level = int(self._quantise(np.array([float(self._pending.sum())]), self._pending.size)[0])
            if not rises or level > rises[-1][1]:
                rises.append((self._blocks, level))
            while falls and falls[-1][1] <= level:
                falls.pop()
            falls.append((self._blocks, level))
        full_scale = PCM16_SCALE**2
        values = self.frames * self.channels
        rms_db = _db(self._sum_squares / values / full_scale) if values else SILENCE_DB
        if self._floor_energy is not None:
            window = FLOOR_WINDOW_BLOCKS * self.block * self.channels
            floor_db = _db(self._floor_energy / window / full_scale)
        elif self._blocks + (self._pending.size > 0) < FLOOR_WINDOW_BLOCKS:
            floor_db = rms_db  # shorter than one window
        else:
            floor_db = SILENCE_DB  # every window is digital zero
        threshold = math.floor(_LEVEL_STEP * max(floor_db + SPEECH_ABOVE_FLOOR_DB, SPEECH_MIN_DB))
        first = next((block for block, level in rises if level > threshold), None)
        last = next((block for block, level in reversed(falls) if level > threshold), None)
        duration = self.frames / self.sample_rate
        return Levels(
            duration=duration,
            rms_db=rms_db,
            peak_db=_db((self._peak / PCM16_SCALE) ** 2) if self._peak else SILENCE_DB,
            noise_floor_db=floor_db,
            digital_silence_seconds=self._longest_zero_run / self.sample_rate,
            head_seconds=duration if first is None else first * self.block / self.sample_rate,
            tail_seconds=duration
            if last is None
            else (self.frames - min((last + 1) * self.block, self.frames)) / self.sample_rate,
        )


def _db(mean_square: float) -> float:
    """A mean square (full scale 1.0) in dB, :data:`SILENCE_DB` for zero."""
    return 10.0 * math.log10(mean_square) if mean_square > 0 else SILENCE_DB


def pcm_blocks(
    path: str | os.PathLike[str],
    *,
    channels: int = 1,
    block_frames: int = 1 << 16,
    timeout: float = 600.0,
) -> Generator[Pcm16, None, None]:
    """Decode the first audio stream of ``path`` at its own sample rate to interleaved int16 PCM with
    ``channels`` channels (ffmpeg mixes or splits to that number), yielding blocks of ``block_frames``
    frames (the last one shorter) while ffmpeg is still decoding: memory does not grow with the file.

    Raises ``FileNotFoundError`` for a missing file and :class:`AudioError` (``audio_undecodable``) if
    ffmpeg fails or takes more than ``timeout`` seconds; stopping early kills ffmpeg.
    """
    name = os.path.abspath(os.fspath(path))
    if not os.path.isfile(name):
        raise FileNotFoundError(name)
    cmd = decode_command(name, ["-map", "0:a:0", "-ac", str(channels)])
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stderr is not None
    stderr = TailDrainer(proc.stderr)
    stderr.start()
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        proc.kill()

    timer = threading.Timer(timeout, expire)
    timer.start()
    frame_bytes = 2 * channels
    try:
        while data := proc.stdout.read(block_frames * frame_bytes):
            whole = len(data) - len(data) % frame_bytes  # a partial frame can only be the very last
            if whole:
                yield np.frombuffer(data[:whole], dtype="<i2")
        proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stderr.join()
        proc.stdout.close()
        proc.stderr.close()
    if expired.is_set():
        raise AudioError("audio_undecodable", f"ffmpeg did not decode {name} within {timeout:g} seconds")
    if proc.returncode != 0:
        raise AudioError("audio_undecodable", f"ffmpeg could not decode {name}: {stderr.text()}")


@dataclass(frozen=True)
class _Stream:
    codec: str
    sample_rate: int
    channels: int  # 0: a layout this module does not know
    bitrate_kbps: int | None


_STREAM_LINE = re.compile(r"^  Stream #0:\d+\S*: Audio: (?P<codec>[\w-]+)(?P<rest>.*)$", re.MULTILINE)
_LAYOUT_CHANNELS = {"mono": 1, "stereo": 2, "2.1": 3, "3.0": 3, "quad": 4, "4.0": 4, "5.0": 5, "5.1": 6}


def _probe(name: str, timeout: float) -> _Stream:
    """The first audio stream of ``name`` as ``ffmpeg -i`` describes it on stderr.

    The path is removed from the text before parsing (ffmpeg prints it verbatim), and only lines that
    start like ffmpeg's own stream lines count: tag values, printed indented after a colon on every line,
    cannot pass for one.
    """
    cmd = [ffmpeg_exe(), "-hide_banner", "-nostdin", "-i", name]
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False)
    text = proc.stderr.decode("utf-8", "replace").replace(name, "<file>")
    match = _STREAM_LINE.search(text)
    rate = re.search(r", (\d+) Hz, ([^,]+)", match.group("rest")) if match else None
    if match is None or rate is None:
        tail = text[-STDERR_TAIL_BYTES:].strip()
        raise AudioError("audio_undecodable", f"ffmpeg finds no audio stream in {name}: {tail}")
    layout = re.sub(r"\(.*\)$", "", rate.group(2).strip())
    counted = re.fullmatch(r"(\d+) channels", layout)
    channels = int(counted.group(1)) if counted else _LAYOUT_CHANNELS.get(layout, 0)
    kbps = re.search(r", (\d+) kb/s", match.group("rest"))
    return _Stream(
        codec=match.group("codec"),
        sample_rate=int(rate.group(1)),
        channels=channels,
        bitrate_kbps=int(kbps.group(1)) if kbps else None,
    )


_MPEG1_L3_KBPS = (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320)
_MPEG2_L3_KBPS = (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)
_MPEG_RATES = {3: (44_100, 48_000, 32_000), 2: (22_050, 24_000, 16_000), 0: (11_025, 12_000, 8_000)}


def mp3_frame_bitrates(path: str | os.PathLike[str]) -> dict[int, int]:
    """How many MPEG audio layer III frames of ``path`` have each bitrate (kb/s), walking the frame
    headers from the first frame (after an ID3v2 tag) to the first thing that is not a frame (an ID3v1
    or APE tag, or damage). A Xing/Info/VBRI first frame holds no audio and is not counted. Only the
    4-byte headers are read: memory and time do not depend on the audio.
    """
    counts: dict[int, int] = {}
    with open(path, "rb", buffering=1 << 16) as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(10)
        pos = 0
        if len(head) == 10 and head[:3] == b"ID3" and all(b < 0x80 for b in head[6:10]):
            pos = 10 + ((head[6] << 21) | (head[7] << 14) | (head[8] << 7) | head[9])
            pos += 10 if head[5] & 0x10 else 0  # a footer
        first = True
        while pos + 4 <= size:
            f.seek(pos)
            word = int.from_bytes(f.read(4), "big")
            version, layer = (word >> 19) & 3, (word >> 17) & 3
            index, rate_index, mono = (word >> 12) & 15, (word >> 10) & 3, (word >> 6) & 3 == 3
            if word >> 21 != 0x7FF or version == 1 or layer != 1 or index in (0, 15) or rate_index == 3:
                break
            kbps = (_MPEG1_L3_KBPS if version == 3 else _MPEG2_L3_KBPS)[index]
            length = (144_000 if version == 3 else 72_000) * kbps // _MPEG_RATES[version][rate_index]
            length += (word >> 9) & 1  # padding
            if first:
                first = False
                side = (17 if mono else 32) if version == 3 else (9 if mono else 17)
                f.seek(pos + 4 + side)
                tag = f.read(4)
                f.seek(pos + 36)
                if tag in (b"Xing", b"Info") or f.read(4) == b"VBRI":
                    pos += length
                    continue
            counts[kbps] = counts.get(kbps, 0) + 1
            pos += length
    return counts


@dataclass(frozen=True, kw_only=True)
class Measures:
    """Everything the rules look at. ``bitrate_kbps`` is the bitrate of every MP3 frame if the file is
    CBR, their average if not, ffmpeg's figure for other codecs (``None`` if it gives none)."""

    duration: float
    sample_rate: int
    channels: int
    codec: str
    bitrate_kbps: int | None
    cbr: bool
    rms_db: float
    peak_db: float
    noise_floor_db: float
    digital_silence_seconds: float
    head_seconds: float
    tail_seconds: float


@dataclass(frozen=True)
class RuleResult:
    """One rule on one file: its stable ``name``, whether it passed, what was measured and the limit."""

    name: str
    passed: bool
    measured: float | int | str | None
    limit: str


def evaluate(m: Measures, rules: AcxRules = ACX_RULES) -> list[RuleResult]:
    """Every rule of ``rules`` on the measures of one file, in a fixed order."""
    r = rules
    bitrate = "none" if m.bitrate_kbps is None else f"{m.bitrate_kbps} kb/s {'CBR' if m.cbr else 'VBR'}"
    return [
        RuleResult("format", m.codec == r.codec, m.codec, r.codec),
        RuleResult(
            "bitrate",
            m.codec == r.codec and m.cbr and (m.bitrate_kbps or 0) >= r.min_bitrate_kbps,
            bitrate,
            f"CBR, at least {r.min_bitrate_kbps} kb/s",
        ),
        RuleResult("sample_rate", m.sample_rate == r.sample_rate, m.sample_rate, f"{r.sample_rate} Hz"),
        RuleResult("channels", m.channels == r.channels, m.channels, str(r.channels)),
        RuleResult(
            "rms",
            r.rms_min_db <= m.rms_db <= r.rms_max_db,
            m.rms_db,
            f"{r.rms_min_db:g} to {r.rms_max_db:g} dB",
        ),
        RuleResult("peak", m.peak_db <= r.peak_max_db, m.peak_db, f"at most {r.peak_max_db:g} dBFS"),
        RuleResult(
            "noise_floor",
            m.noise_floor_db <= r.noise_floor_max_db,
            m.noise_floor_db,
            f"at most {r.noise_floor_max_db:g} dB",
        ),
        RuleResult(
            "room_tone",
            m.digital_silence_seconds < r.max_digital_silence_seconds,
            m.digital_silence_seconds,
            f"no digital silence of {r.max_digital_silence_seconds:g} s or more",
        ),
        RuleResult(
            "head",
            r.head_min_seconds <= m.head_seconds <= r.head_max_seconds,
            m.head_seconds,
            f"{r.head_min_seconds:g} to {r.head_max_seconds:g} s",
        ),
        RuleResult(
            "tail",
            r.tail_min_seconds <= m.tail_seconds <= r.tail_max_seconds,
            m.tail_seconds,
            f"{r.tail_min_seconds:g} to {r.tail_max_seconds:g} s",
        ),
        RuleResult(
            "duration",
            m.duration <= r.max_duration_seconds,
            m.duration,
            f"at most {r.max_duration_seconds:g} s",
        ),
    ]


@dataclass(frozen=True, kw_only=True)
class AcxFileReport(Measures):
    """The ACX check of one file: its ``name`` (no folders), what was measured and every rule's result."""

    name: str
    rules: list[RuleResult]

    @property
    def passed(self) -> bool:
        return all(rule.passed for rule in self.rules)

    def failed(self) -> list[str]:
        """The names of the rules that failed."""
        return [rule.name for rule in self.rules if not rule.passed]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key, value in data.items():
            if isinstance(value, float):
                data[key] = round(value, 2 if key.endswith("_db") else 3)
        for rule in data["rules"]:
            if isinstance(rule["measured"], float):
                rule["measured"] = round(rule["measured"], 3)
        return {"name": self.name, "passed": self.passed, **data}


@dataclass(frozen=True)
class AcxReport:
    """The ACX check of a delivery's files, in order."""

    files: list[AcxFileReport]

    @property
    def passed(self) -> bool:
        return all(f.passed for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "files": [f.to_json() for f in self.files]}


def check_file(
    path: str | os.PathLike[str],
    *,
    expected_bitrate_kbps: int = 192,
    name: str | None = None,
    timeout: float = 600.0,
) -> AcxFileReport:
    """Decode ``path`` and check it against :data:`ACX_RULES` (MP3 frames at ``expected_bitrate_kbps``
    or more, all alike). ``name`` is what the report calls the file (its base name by default).

    Raises ``FileNotFoundError`` and :class:`AudioError` (``audio_undecodable``) for a file that is not
    audio at all; anything that decodes gets a report, failing where it must.
    """
    file = os.path.abspath(os.fspath(path))
    if not os.path.isfile(file):
        raise FileNotFoundError(file)
    stream = _probe(file, timeout)
    channels = stream.channels or 1  # an unknown layout is measured as a mono mix (and fails "channels")
    meter = LevelMeter(stream.sample_rate, channels)
    for block in pcm_blocks(file, channels=channels, timeout=timeout):
        meter.add(block)
    levels = meter.result()
    bitrate, cbr = stream.bitrate_kbps, False
    if stream.codec == "mp3":
        counts = mp3_frame_bitrates(file)
        frames = sum(counts.values())
        cbr = len(counts) == 1
        bitrate = round(sum(k * n for k, n in counts.items()) / frames) if frames else None
    measures = Measures(
        duration=levels.duration,
        sample_rate=stream.sample_rate,
        channels=stream.channels,
        codec=stream.codec,
        bitrate_kbps=bitrate,
        cbr=cbr,
        rms_db=levels.rms_db,
        peak_db=levels.peak_db,
        noise_floor_db=levels.noise_floor_db,
        digital_silence_seconds=levels.digital_silence_seconds,
        head_seconds=levels.head_seconds,
        tail_seconds=levels.tail_seconds,
    )
    rules = evaluate(measures, replace(ACX_RULES, min_bitrate_kbps=expected_bitrate_kbps))
    return AcxFileReport(**asdict(measures), name=name or os.path.basename(file), rules=rules)


def check_files(paths: Iterable[str | os.PathLike[str]], *, expected_bitrate_kbps: int = 192) -> AcxReport:
    """The ACX check of every file in ``paths``, one at a time."""
    return AcxReport([check_file(p, expected_bitrate_kbps=expected_bitrate_kbps) for p in paths])
