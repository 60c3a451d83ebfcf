"""``python -m bench.stitch``: a long book stitched by Tome's streaming ``stitch`` and by pydub accumulation.

1. A book of ``--hours`` of chunk WAVs (24 kHz mono int16, 2-20 s each: about 3,300 for 10 hours, in
   30 chapters, with sentence, paragraph and chapter pauses) is written once, cut from a 60-second pool
   of speech-shaped audio (voiced pulse trains through formant bands, fricative noise, gaps, syllable
   envelope: see ``_speech_pool``), so that writing, not generating, is the cost. With ``--out-dir``
   the chunks are kept and reused by the next run.
2. Each case runs in a fresh ``python -m bench.stitch --case ...`` process, so its peak RSS is its own:
   the Python process's ``VmHWM`` (``/proc/self/status``) when its work is done, and the ffmpeg
   child's, polled from ``/proc/PID/status`` while it runs (see :func:`measure`). Speed is the
   book's duration over the case's wall time (work only: interpreter start and imports excluded).

   - ``tome-mp3``: ``worker.audio.stitch`` with the chapters (ID3 CHAP, read back with ffmpeg) and a
     title, on the first tenth of the book (at most 1 hour) and on all of it: memory must be flat.
   - ``tome-m4b``: the same to M4B (MP4 chapters, read back), on 1% of the book (a probe of its speed),
     then on the whole book if predicted to fit ``M4B_BUDGET_SECONDS``, else on the longest tenth
     that does, and extrapolated (labelled).
   - ``pydub-mp3``: what the open-source tools do: ``book += AudioSegment.from_wav(chunk)`` and
     ``book += AudioSegment.silent(pause)`` for every chunk, then ``book.export(format="mp3")`` with the
     bundled ffmpeg. On the short prefix, then on the whole book if its predicted time and memory fit
     this machine, else on the longest prefix that does, and extrapolated (labelled).

Both encode at the same bitrate, sample rate and pauses. ``--no-caps`` runs everything on the whole
book. Exits 1 if a case failed, an output does not have the expected duration, size or chapters, or
Tome's peak RSS is not flat or is above the target (300 MB).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
import soundfile as sf
from scipy.signal import butter, sosfilt

from worker.audio import BookTags, StitchPiece, ffmpeg_exe, stitch
from worker.audio.chapters import DEFAULT_PAUSES
from worker.audio.master import Mastering

SAMPLE_RATE = 24_000
CHAPTERS = 30
BITRATE_KBPS = 64
CHUNK_SECONDS = (2.0, 20.0)
RSS_TARGET_MB = 300.0
FLAT_TOLERANCE = 1.15
"""Tome's peak RSS on the whole book may exceed the short prefix's by at most 15% (plus 16 MB)."""
M4B_BUDGET_SECONDS = 200.0
"""The M4B case runs on the whole book only if predicted (from a probe of 1% of it) to take at most this
long: ffmpeg's AAC encoder runs at about 60x real time here (MP3: about 300x)."""
PYDUB_BUDGET_SECONDS = 120.0
"""pydub runs on the whole book only if predicted to take at most this long ..."""
PYDUB_MEMORY_SHARE = 0.5
"""... and to need at most this share of the machine's available memory."""
CASE_TIMEOUT_SECONDS = 1800.0
REPO = Path(__file__).resolve().parents[1]
MANIFEST = "manifest.json"
BOOK_VERSION = 3
"""Bumped whenever the chunks' content changes, so that a kept book is not reused by mistake."""


@dataclass(frozen=True)
class Chunk:
    name: str
    samples: int
    chapter: int
    pause: str


@dataclass(frozen=True)
class Result:
    """One case, as its process reports it (``accumulate_s``: pydub's loop of ``+=``, else 0)."""

    case: str
    chunks: int
    audio_s: float
    wall_s: float
    python_mb: float
    ffmpeg_mb: float
    out_bytes: int
    chapters: int
    accumulate_s: float

    @property
    def total_mb(self) -> float:
        return self.python_mb + self.ffmpeg_mb

    @property
    def speed(self) -> float:
        return self.audio_s / self.wall_s if self.wall_s > 0 else math.inf


def book_seconds(chunks: Sequence[Chunk]) -> float:
    """Duration of the stitched book: the chunks and the pause after each."""
    pauses = sum(DEFAULT_PAUSES.samples(c.pause, SAMPLE_RATE) for c in chunks)
    return (sum(c.samples for c in chunks) + pauses) / SAMPLE_RATE


def prefix(chunks: Sequence[Chunk], hours: float) -> list[Chunk]:
    """The first chunks whose audio reaches ``hours`` (at least one)."""
    out: list[Chunk] = []
    total = 0
    for chunk in chunks:
        if out and total >= hours * 3600 * SAMPLE_RATE:
            break
        out.append(chunk)
        total += chunk.samples
    return out


def _speech_pool(rng: np.random.Generator, seconds: float) -> npt.NDArray[np.float32]:
    """Speech-shaped audio, peak 0.5: 100 ms slots that are voiced (75%: a glottal pulse train at a
    drifting 100-200 Hz pitch through three formant bands), fricative (noise at 2-6 kHz) or silent (8%),
    under a 4 Hz syllable envelope."""
    n = round(seconds * SAMPLE_RATE)
    t = np.arange(n) / SAMPLE_RATE
    f0 = 140 + 40 * np.sin(2 * np.pi * 0.3 * t + rng.uniform(0, 6)) + 20 * np.sin(2 * np.pi * 2.1 * t)
    pulses = np.diff(np.floor(np.cumsum(f0 / SAMPLE_RATE)), prepend=0.0)
    voiced = np.zeros(n)
    for low, high, gain in ((300, 900, 1.0), (1000, 2000, 0.5), (2200, 3200, 0.25)):
        voiced += gain * sosfilt(
            butter(2, [low, high], btype="bandpass", fs=SAMPLE_RATE, output="sos"), pulses
        )
    hiss = sosfilt(
        butter(4, [2000, 6000], btype="bandpass", fs=SAMPLE_RATE, output="sos"), rng.standard_normal(n)
    )
    slot = rng.random(n // 2400 + 1)
    kind = np.repeat(slot, 2400)[:n]
    x = np.where(kind < 0.75, voiced / np.std(voiced), 0.3 * hiss / np.std(hiss))
    x *= np.sqrt(np.abs(np.sin(2 * np.pi * 4.0 * t))) * (kind <= 0.92)
    pool: npt.NDArray[np.float32] = (0.5 * x / np.max(np.abs(x))).astype(np.float32)
    return pool


def make_book(folder: Path, hours: float, seed: int = 12) -> list[Chunk]:
    """Write (or reuse, if ``folder`` holds the same book) chunk WAVs totalling ``hours``."""
    manifest = folder / MANIFEST
    if manifest.exists():
        data = json.loads(manifest.read_text())
        if data.get("hours") == hours and data.get("seed") == seed and data.get("version") == BOOK_VERSION:
            return [Chunk(**c) for c in data["chunks"]]
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    pool = _speech_pool(rng, 60.0)
    fade = np.linspace(0.0, 1.0, SAMPLE_RATE // 100, dtype=np.float32)
    lengths: list[int] = []
    target = hours * 3600 * SAMPLE_RATE
    while sum(lengths) < target:
        lengths.append(round(rng.uniform(*CHUNK_SECONDS) * SAMPLE_RATE))
    lengths[-1] = max(SAMPLE_RATE, lengths[-1] - (sum(lengths) - round(target)))
    # The longest chunk first: mastering holds one chunk at a time, so memory follows the longest chunk,
    # and the short run (a prefix of the book) must meet it too for "flat in the book's length" to be fair.
    longest = lengths.index(max(lengths))
    lengths[0], lengths[longest] = lengths[longest], lengths[0]
    chapters = min(CHAPTERS, len(lengths))
    chunks: list[Chunk] = []
    for i, n in enumerate(lengths):
        start = int(rng.integers(0, pool.size - n))
        x = pool[start : start + n] * np.float32(rng.uniform(0.5, 1.0))
        x[: fade.size] *= fade
        x[-fade.size :] *= fade[::-1]
        name = f"{i:05d}.wav"
        sf.write(folder / name, x, SAMPLE_RATE, subtype="PCM_16")
        chapter = i * chapters // len(lengths)
        last_of_chapter = i + 1 == len(lengths) or (i + 1) * chapters // len(lengths) != chapter
        pause = "chapter" if last_of_chapter else "paragraph" if i % 5 == 4 else "sentence"
        chunks.append(Chunk(name, n, chapter, pause))
    data = {"hours": hours, "seed": seed, "version": BOOK_VERSION, "chunks": [asdict(c) for c in chunks]}
    manifest.write_text(json.dumps(data))
    return chunks


# --- one case, in its own process --------------------------------------------------------------------


def _tome(fmt: str, folder: Path, chunks: Sequence[Chunk], out: Path) -> tuple[float, int]:
    # Mastered as a job is: each chunk its own gain (here -3..+3 dB, as levels measured at render time
    # would give) and the true-peak limiter, one chunk in memory at a time.
    pieces = [
        StitchPiece(str(folder / c.name), c.pause, c.chapter, c.samples, float(i % 7 - 3))
        for i, c in enumerate(chunks)
    ]
    titles = {c.chapter: f"Chapter {c.chapter + 1}" for c in chunks}
    result = stitch(
        pieces,
        out,
        "mp3" if fmt == "mp3" else "m4b",
        SAMPLE_RATE,
        bitrate_kbps=BITRATE_KBPS,
        tags=BookTags(title="Stitch bench", author="Tome"),
        chapter_titles=titles,
        mastering=Mastering(),
    )
    return result.duration, 0


def _pydub(folder: Path, chunks: Sequence[Chunk], out: Path) -> tuple[float, float]:
    with warnings.catch_warnings():  # it looks for ffmpeg on PATH at import, and imports audioop
        warnings.simplefilter("ignore")
        from pydub import AudioSegment

    AudioSegment.converter = ffmpeg_exe()
    start = time.perf_counter()
    book = AudioSegment.empty()
    for c in chunks:
        book += AudioSegment.from_wav(str(folder / c.name))  # format wav: read in Python, no ffprobe
        book += AudioSegment.silent(round(DEFAULT_PAUSES.seconds(c.pause) * 1000), frame_rate=SAMPLE_RATE)
    accumulate = time.perf_counter() - start
    book.export(str(out), format="mp3", bitrate=f"{BITRATE_KBPS}k")
    return int(book.frame_count()) / SAMPLE_RATE, accumulate


def _child_hwm_kb(proc: str, parent: str, parent_name: str) -> int:
    """VmHWM of ``proc`` if it is a child of ``parent`` running its own program (between fork and exec,
    a child still has, and reports, its parent's memory and name)."""
    try:
        status = Path(proc, "status").read_text()
    except OSError:  # it exited meanwhile
        return 0
    if _status_field(status, "PPid") != parent or _status_field(status, "Name") == parent_name:
        return 0
    return int(_status_field(status, "VmHWM").removesuffix(" kB") or 0)


def _status_field(status: str, field: str) -> str:
    match = re.search(rf"^{field}:\s+(.*)$", status, re.M)
    return match.group(1).strip() if match else ""


def _own_peak_mb() -> float:
    return int(_status_field(Path("/proc/self/status").read_text(), "VmHWM").removesuffix(" kB")) / 1024


def _run_case(case: str, folder: Path, count: int, out: Path) -> None:
    data = json.loads((folder / MANIFEST).read_text())
    chunks = [Chunk(**c) for c in data["chunks"][:count]]
    start = time.perf_counter()
    if case == "pydub-mp3":
        audio, accumulate = _pydub(folder, chunks, out)
    else:
        audio, accumulate = _tome(case.removeprefix("tome-"), folder, chunks, out)
    wall = time.perf_counter() - start
    result = Result(case, count, audio, wall, _own_peak_mb(), 0.0, out.stat().st_size, 0, accumulate)
    print(json.dumps(asdict(result)))


# --- the parent ---------------------------------------------------------------------------------------


def measure(case: str, folder: Path, chunks: Sequence[Chunk], out: Path) -> Result | str:
    """Run one case in a fresh process; its result, or a problem.

    The process reports its own peak RSS (``VmHWM``) when its work is done. Its ffmpeg child's is
    polled from here every 50 ms, from ``/proc/PID/status``: ``getrusage(RUSAGE_CHILDREN)`` cannot
    tell it, as Linux counts the parent's RSS at fork time in a child's ``ru_maxrss``; ``VmHWM`` is
    a high-water mark, so the last reading before the child exits is its peak but for growth in its
    last 50 ms. Polling from here keeps the case process's interpreter lock free.
    """
    cmd = [sys.executable, "-m", "bench.stitch", "--case", case, "--dir", str(folder)]
    cmd += ["--count", str(len(chunks)), "--out", str(out)]
    tmp = out.parent / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp)}  # pydub's export writes the whole WAV to a temp file
    me = _status_field(Path("/proc/self/status").read_text(), "Name")  # the same interpreter's name
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=stdout, stderr=stderr)
        deadline = time.monotonic() + CASE_TIMEOUT_SECONDS
        peak_kb = 0
        while proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                return f"{case} on {len(chunks)} chunks did not finish within {CASE_TIMEOUT_SECONDS:g} s"
            for entry in os.scandir("/proc"):
                if entry.name.isdigit():
                    peak_kb = max(peak_kb, _child_hwm_kb(entry.path, str(proc.pid), me))
            time.sleep(0.05)
        stdout.seek(0)
        stderr.seek(0)
        report, errors = stdout.read().decode(), stderr.read().decode("utf-8", "replace")
    if proc.returncode != 0:
        return f"{case} on {len(chunks)} chunks failed ({proc.returncode}): {_last_lines(errors)}"
    result = replace(Result(**json.loads(report.strip().splitlines()[-1])), ffmpeg_mb=peak_kb / 1024)
    if case.startswith("tome-"):
        result = replace(result, chapters=_chapters_in(out))
    return result


def _last_lines(text: str, n: int = 3) -> str:
    return " | ".join(text.strip().splitlines()[-n:])


def _chapters_in(path: Path) -> int:
    """Chapters in ``path`` as ffmpeg reads them back (its ffmetadata output)."""
    cmd = [ffmpeg_exe(), "-v", "error", "-nostdin", "-i", str(path), "-f", "ffmetadata", "-"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    return proc.stdout.count("[CHAPTER]")


def _check(result: Result, chunks: Sequence[Chunk]) -> list[str]:
    """The output has the book's duration, about the bitrate's size and (Tome's) every chapter."""
    problems = []
    expected = book_seconds(chunks)
    if abs(result.audio_s - expected) > 1e-3:
        problems.append(f"{result.case}: {result.audio_s:.3f} s of audio, expected {expected:.3f} s")
    nominal = expected * BITRATE_KBPS * 1000 / 8
    if not 0.75 * nominal <= result.out_bytes <= 1.25 * nominal + 65536:
        problems.append(f"{result.case}: {result.out_bytes} bytes, expected about {nominal:.0f}")
    chapters = len({c.chapter for c in chunks})
    if result.case.startswith("tome-") and result.chapters != chapters:
        problems.append(f"{result.case}: {result.chapters} chapters read back, expected {chapters}")
    return problems


@dataclass(frozen=True)
class Row:
    label: str
    hours: float
    result: Result
    note: str = ""

    def line(self) -> str:
        r = self.result
        return (
            f"| {self.label} | {self.hours:.2f} | {r.chunks} | {r.wall_s:.2f} | {r.speed:.0f}x | "
            f"{r.python_mb:.0f} | {r.ffmpeg_mb:.0f} | {r.total_mb:.0f} | {self.note} |"
        )


class Bench:
    """The cases of one run, their rows and the problems found."""

    def __init__(self, folder: Path, out: Path) -> None:
        self.folder, self.out = folder, out
        out.mkdir(parents=True, exist_ok=True)
        self.rows: list[Row] = []
        self.problems: list[str] = []

    def run(self, label: str, case: str, chunks: Sequence[Chunk], note: str = "") -> Row | None:
        path = self.out / f"{case}-{len(chunks)}.{'m4b' if case == 'tome-m4b' else 'mp3'}"
        got = measure(case, self.folder, chunks, path)
        path.unlink(missing_ok=True)
        if isinstance(got, str):
            self.problems.append(got)
            return None
        self.problems.extend(_check(got, chunks))
        row = Row(label, book_seconds(chunks) / 3600, got, note)
        self.rows.append(row)
        return row


def _longest(book: list[Chunk], hours: float, step: float, fits: Callable[[float], bool]) -> list[Chunk]:
    """The whole book if ``fits(hours)``, else the longest prefix of a multiple of ``step`` hours
    (at least ``step``) that fits."""
    if fits(hours):
        return book
    steps = [k * step for k in range(1, math.ceil(hours / step)) if fits(k * step)]
    return prefix(book, max(steps, default=step))


def _pydub_wall(short: Row, hours: float) -> float:
    """pydub's wall time at ``hours`` from one run: every ``+=`` copies the whole book so far, so the
    accumulation grows as the square of the length; reading and export grow linearly."""
    k = hours / short.hours
    r = short.result
    return r.accumulate_s * k * k + (r.wall_s - r.accumulate_s) * k


def _pydub_fit(a: Row, b: Row, hours: float) -> tuple[float, float]:
    """pydub's (wall s, total MB) at ``hours`` from two runs: accumulation as c1 h + c2 h^2 through
    both, the rest of the time and the memory (the book's PCM, held twice while it is copied) as lines
    through both."""
    ra, rb = a.result, b.result
    c2 = (rb.accumulate_s / b.hours - ra.accumulate_s / a.hours) / (b.hours - a.hours)
    c1 = ra.accumulate_s / a.hours - c2 * a.hours

    def line(ya: float, yb: float) -> float:
        return ya + (yb - ya) * (hours - a.hours) / (b.hours - a.hours)

    rest = line(ra.wall_s - ra.accumulate_s, rb.wall_s - rb.accumulate_s)
    return c1 * hours + c2 * hours * hours + rest, line(ra.total_mb, rb.total_mb)


def _available_mb() -> float:
    text = Path("/proc/meminfo").read_text()
    return int(_status_field(text, "MemAvailable").removesuffix(" kB") or 4 << 20) / 1024


@dataclass(frozen=True)
class Cases:
    tome_short: Row | None
    tome: Row | None
    m4b_probe: Row | None
    m4b: Row | None
    pydub_short: Row | None
    pydub: Row | None


def _run_cases(bench: Bench, book: list[Chunk], hours: float, caps: bool) -> Cases:
    short = prefix(book, min(1.0, hours / 10))
    budget = 1.0 if caps else math.inf
    tome_short = bench.run("Tome stitch -> MP3", "tome-mp3", short)
    tome = bench.run("Tome stitch -> MP3", "tome-mp3", book)
    probe = bench.run("Tome stitch -> M4B", "tome-m4b", prefix(book, hours / 100), "probe for the length")
    m4b = None
    if probe is not None:
        speed = probe.result.speed

        def m4b_fits(h: float) -> bool:
            return h * 3600 / speed <= budget * M4B_BUDGET_SECONDS

        chunks = _longest(book, hours, hours / 10, m4b_fits)
        m4b = bench.run("Tome stitch -> M4B", "tome-m4b", chunks, "" if chunks is book else "capped (time)")
    pydub_short = bench.run("pydub += then export MP3", "pydub-mp3", short)
    pydub = None
    if pydub_short is not None:
        base = pydub_short
        room = PYDUB_MEMORY_SHARE * _available_mb()

        def pydub_fits(h: float) -> bool:
            memory = base.result.total_mb * h / base.hours
            return _pydub_wall(base, h) <= budget * PYDUB_BUDGET_SECONDS and memory <= room

        chunks = _longest(book, hours, base.hours / 2, pydub_fits)
        if len(chunks) <= len(short):  # a second, longer point is needed to extrapolate
            chunks = prefix(book, 1.5 * base.hours)
        note = "" if chunks is book else "capped (time or memory budget)"
        pydub = bench.run("pydub += then export MP3", "pydub-mp3", chunks, note)
    return Cases(tome_short, tome, probe, m4b, pydub_short, pydub)


def _extrapolated(c: Cases, full_h: float, chunks: int) -> tuple[list[str], tuple[float, float] | None]:
    """Table rows for the cases that were capped, and pydub's (wall s, MB) on the whole book."""
    lines = []
    m4b = _m4b_full(c, full_h)
    if m4b is not None:
        wall, python_mb, ffmpeg_mb = m4b
        lines.append(
            f"| Tome stitch -> M4B | {full_h:.2f} | {chunks} | ~{wall:.0f} | ~{full_h * 3600 / wall:.0f}x | "
            f"~{python_mb:.0f} | ~{ffmpeg_mb:.0f} | ~{python_mb + ffmpeg_mb:.0f} | EXTRAPOLATED: lines "
            "through the two M4B runs (ffmpeg's MP4 muxer holds an index entry per AAC frame to the end) |"
        )
    if c.pydub is None or c.pydub_short is None:
        return lines, None
    if c.pydub.hours >= full_h - 1e-9:
        return lines, (c.pydub.result.wall_s, c.pydub.result.total_mb)
    wall, mb = _pydub_fit(c.pydub_short, c.pydub, full_h)
    lines.append(
        f"| pydub += then export MP3 | {full_h:.2f} | {chunks} | ~{wall:.0f} | ~{full_h * 3600 / wall:.0f}x "
        f"| | | ~{mb:.0f} | EXTRAPOLATED from the two pydub runs |"
    )
    return lines, (wall, mb)


def _ratios(c: Cases, full_h: float, pydub_full: tuple[float, float] | None) -> list[str]:
    lines = []
    if c.tome_short and c.pydub_short:
        a, b = c.tome_short.result, c.pydub_short.result
        lines.append(
            f"At {c.tome_short.hours:.2f} h (both measured): pydub uses {b.total_mb / a.total_mb:.1f}x "
            f"Tome's peak memory and {b.wall_s / a.wall_s:.1f}x its time (both to MP3)."
        )
    if c.tome and pydub_full:
        wall, mb = pydub_full
        t = c.tome.result
        how = "both measured" if c.pydub and c.pydub.hours >= full_h - 1e-9 else "pydub EXTRAPOLATED"
        lines.append(
            f"At {full_h:.2f} h ({how}): pydub {mb / t.total_mb:.1f}x the memory ({mb:.0f} MB against "
            f"{t.total_mb:.0f} MB), {wall / t.wall_s:.1f}x the time ({full_h * 3600 / wall:.0f}x real "
            f"time against {t.speed:.0f}x)."
        )
    if c.tome_short and c.tome:
        low, high = c.tome_short.result.total_mb, c.tome.result.total_mb
        short_h, long_h = c.tome_short.hours, c.tome.hours
        lines.append(
            f"Tome's peak RSS (Python + ffmpeg): {low:.0f} MB at {short_h:.2f} h, {high:.0f} MB at "
            f"{long_h:.2f} h ({high / low:.2f}x for {long_h / short_h:.0f}x the audio)."
        )
    return lines


def _m4b_full(c: Cases, full_h: float) -> tuple[float, float, float] | None:
    """(wall s, Python MB, ffmpeg MB) of the M4B case on the whole book, if it was capped: each a line
    through the probe and the capped run (Python's memory is flat; ffmpeg's grows with the MP4 index)."""
    a, b = c.m4b_probe, c.m4b
    if a is None or b is None or b.hours >= full_h - 1e-9 or b.hours <= a.hours:
        return None

    def line(ya: float, yb: float) -> float:
        return ya + (yb - ya) * (full_h - a.hours) / (b.hours - a.hours)

    ra, rb = a.result, b.result
    return line(ra.wall_s, rb.wall_s), max(ra.python_mb, rb.python_mb), line(ra.ffmpeg_mb, rb.ffmpeg_mb)


def _memory_problems(c: Cases, full_h: float) -> list[str]:
    problems = []
    if c.tome_short and c.tome:
        short, full = c.tome_short.result, c.tome.result
        # Python and ffmpeg apart: ffmpeg's peak is sampled every 50 ms, and a short case's ffmpeg may
        # end unsampled (0), which would make the sum look like growth.
        pairs = [("Python", short.python_mb, full.python_mb)]
        if short.ffmpeg_mb > 0 and full.ffmpeg_mb > 0:
            pairs.append(("ffmpeg", short.ffmpeg_mb, full.ffmpeg_mb))
        for who, a, b in pairs:
            if b > FLAT_TOLERANCE * a + 16:
                problems.append(f"Tome's peak RSS ({who}) grows with the book: {a:.0f} MB -> {b:.0f} MB")
    for row in (c.tome, c.m4b):
        if row is not None and row.result.total_mb > RSS_TARGET_MB:
            mb = row.result.total_mb
            problems.append(f"{row.result.case}: peak RSS {mb:.0f} MB, above the {RSS_TARGET_MB:g} MB target")
    m4b = _m4b_full(c, full_h)
    if m4b is not None and m4b[1] + m4b[2] > RSS_TARGET_MB:
        mb = m4b[1] + m4b[2]
        problems.append(f"tome-m4b: extrapolated peak RSS {mb:.0f} MB, above the {RSS_TARGET_MB:g} MB target")
    return problems


def run_stitch_bench(base: Path, hours: float, caps: bool = True) -> tuple[list[str], list[str]]:
    """Write a book of ``hours`` under ``base`` (reused if there) and measure every case.

    Returns the problems found and the report: a markdown table and a few lines of ratios. With
    ``caps``, the M4B and pydub cases run on the longest prefix predicted to fit their budgets
    (:data:`M4B_BUDGET_SECONDS`, :data:`PYDUB_BUDGET_SECONDS`, :data:`PYDUB_MEMORY_SHARE`) and their
    whole-book figures are extrapolated, labelled so.
    """
    if not hours > 0:
        raise ValueError(f"hours must be positive, got {hours!r}")
    started = time.perf_counter()
    folder = base / f"chunks-{hours:g}h"
    book = make_book(folder, hours)
    made = time.perf_counter() - started
    bench = Bench(folder, base / "out")
    cases = _run_cases(bench, book, hours, caps)
    full_h = book_seconds(book) / 3600
    extra, pydub_full = _extrapolated(cases, full_h, len(book))
    lines = [
        f"Stitching {full_h:.2f} h: {len(book)} chunk WAVs of {CHUNK_SECONDS[0]:g}-{CHUNK_SECONDS[1]:g} s "
        f"(24 kHz mono int16, written in {made:.0f} s) in {len({c.chapter for c in book})} chapters, to "
        f"MP3 and M4B at {BITRATE_KBPS} kb/s; each case in a fresh process; speed = audio / wall time.",
        "",
        "| case | hours | chunks | wall s | speed | Python peak MB | ffmpeg peak MB | total MB | note |",
        "|---|---|---|---|---|---|---|---|---|",
        *(row.line() for row in bench.rows),
        *extra,
        "",
        *_ratios(cases, full_h, pydub_full),
        f"Bench wall time {time.perf_counter() - started:.0f} s.",
    ]
    return bench.problems + _memory_problems(cases, full_h), lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stitch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=10.0, help="length of the book (default 10)")
    parser.add_argument("--out-dir", type=Path, help="keep (and reuse) the chunks here (default: a temp dir)")
    parser.add_argument(
        "--no-caps", action="store_true", help="run M4B and pydub on the whole book, however long it takes"
    )
    parser.add_argument("--case", choices=("tome-mp3", "tome-m4b", "pydub-mp3"), help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        _run_case(args.case, args.dir, args.count, args.out)
        return 0
    base = args.out_dir or Path(tempfile.mkdtemp(prefix="tome-stitch-bench-"))
    try:
        problems, lines = run_stitch_bench(base, args.hours, caps=not args.no_caps)
    finally:
        if args.out_dir is None:
            shutil.rmtree(base, ignore_errors=True)
        else:
            shutil.rmtree(base / "out", ignore_errors=True)
    print("\n".join(lines))
    for problem in problems:
        print(f"FAIL {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
