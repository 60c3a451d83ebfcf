"""The qwen3-tts engine on a GPU: what a batch of n requests costs and produces, for n = 1, 2, 4, ... 32.

For each checkpoint (always the tiny random one of the tests, built in the bench's temp dir; also the one
named by ``TOME_QWEN3_MODEL_DIR`` when set) and each batch size n: ``engine.max_batch_size = n`` and one
``synthesize`` call with n requests of identical params (so one generate call; the calls are counted on
``generate_voice_clone`` and shown). Requests alternate between two voices, as production batches mix
voices; ``max_new_tokens`` and the per-request seeds are fixed, so runs compare. One warm-up call, then the
median of ``REPEATS`` timed calls per size, the sizes interleaved round-robin. Figures per size:

- wall: seconds of one ``synthesize`` call (CUDA synchronised before and after);
- audio: seconds of audio the call produced (all n requests);
- throughput: audio / wall (batch aggregate, "x real time");
- RTF: wall / (audio / n), the real-time factor of one request: a chunk waits for its whole batch;
- peak memory: ``torch.cuda.max_memory_allocated`` during the call (max over repeats), and how much of it
  is above what was allocated before the call (weights, cached prompts); "n/a (cpu)" on a CPU.

Ratios are against n = 1 of the same run; no absolute target is asserted. Problems (exit 1): a request
that rendered no audio, a batch rendered in other than one generate call, a checkpoint that fails to load.
Out of memory at some n is a finding, not a problem: the larger sizes are then not tried.
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from worker.config import load_settings
from worker.engines.base import EngineError, SpeakerPrompt, SynthesisRequest
from worker.engines.qwen3 import Qwen3Engine, import_qwen_tts

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32)
DEVICE_CHOICES = ("auto", "cuda", "cpu", "skip")
REPEATS = 3
MAX_NEW_TOKENS = 48
SEED_COST_BATCH = 8  # the batch size at which per-chunk seeds are compared with one shared stream
CPU_HINT = "python -m bench --qwen3-device cpu"
TEXTS = (
    "The keeper climbed the stairs and counted every step.",
    "A fisherman mended his net by the light of a lamp.",
    "The ferry pilot watched the fog roll over the water.",
    "Old Mrs. Hale listened to the gulls above the pier.",
    "The harbour master wrote the names of the boats down.",
    "Beyond the wall, the ships passed slowly into the night.",
    "She folded the chart and put it back in the drawer.",
    "The tide turned, and the quay was quiet once again.",
)
VOICES = (  # (fundamental Hz, transcript of the 2 s reference)
    (110.0, "Hello there, this is a low voice."),
    (220.0, "And this one is a higher voice."),
)


@dataclass(frozen=True)
class BatchRow:
    batch: int
    wall_s: float  # median over the repeats
    wall_spread: float  # (slowest - fastest) / median of the repeats: how quiet the machine was
    audio_s: float  # median over the repeats (identical runs on a CPU)
    calls: tuple[int, ...]  # rows of each generate call of one synthesize call (expected: (batch,))
    empty: int  # requests that rendered no audio, over all repeats
    peak_mib: float | None  # None on a CPU
    above_mib: float | None  # peak minus what was allocated before the call
    oom: bool = False

    @property
    def throughput(self) -> float:
        return self.audio_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def rtf(self) -> float:
        return self.wall_s / (self.audio_s / self.batch) if self.audio_s > 0 else float("inf")


@dataclass(frozen=True)
class CheckpointRun:
    label: str
    version: str
    load_s: float
    encode_s: float
    rows: list[BatchRow]
    seeds: SeedCost | None = None


@dataclass(frozen=True)
class SeedCost:
    """Per-chunk seeds against one shared random stream: the same generate calls, in ms per frame."""

    batch: int
    shared_ms: float  # median ms per generated frame (frames of the batch's longest row)
    seeded_ms: float

    @property
    def ratio(self) -> float:
        return self.seeded_ms / self.shared_ms if self.shared_ms > 0 else float("inf")


def parse_batches(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> ``(1, 2, 4)``: positive, distinct, ascending batch sizes."""
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise ValueError(f"batch sizes must be comma-separated integers, not {text!r}") from exc
    if not sizes or min(sizes) < 1 or list(sizes) != sorted(set(sizes)):
        raise ValueError(f"batch sizes must be positive, distinct and ascending, not {text!r}")
    return sizes


def reference(f0: float, sample_rate: int, seconds: float = 2.0) -> npt.NDArray[np.float32]:
    """A voiced-sounding reference: a tone and its octave, a little noise (seeded)."""
    t = np.arange(int(sample_rate * seconds), dtype=np.float64) / sample_rate
    noise = np.random.default_rng(int(f0)).standard_normal(t.size)
    wav = 0.3 * np.sin(2 * np.pi * f0 * t) + 0.1 * np.sin(2 * np.pi * 2 * f0 * t) + 0.01 * noise
    return wav.astype(np.float32)


def requests(prompts: Sequence[SpeakerPrompt], n: int, max_new_tokens: int) -> list[SynthesisRequest]:
    """n requests, voices alternating, request i always the same text and seed whatever n is."""
    return [
        SynthesisRequest(
            TEXTS[i % len(TEXTS)],
            prompts[i % len(prompts)],
            params={"max_new_tokens": max_new_tokens},
            seed=i,
        )
        for i in range(n)
    ]


def measure_batches(
    engine: Qwen3Engine,
    device: str,
    prompts: Sequence[SpeakerPrompt],
    batches: Sequence[int],
    *,
    repeats: int = REPEATS,
    max_new_tokens: int = MAX_NEW_TOKENS,
) -> list[BatchRow]:
    """One row per batch size (see the module docstring), on the ``device`` the engine was made for."""
    import torch

    cuda = device.startswith("cuda")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    configured = engine.max_batch_size
    engine.max_batch_size = 2
    engine.synthesize(requests(prompts, 2, max_new_tokens))  # warm-up: first-call allocations, kernels
    walls: dict[int, list[float]] = {n: [] for n in batches}
    audio: dict[int, list[float]] = {n: [] for n in batches}
    calls: dict[int, tuple[int, ...]] = {}
    empty = dict.fromkeys(batches, 0)
    peak = dict.fromkeys(batches, 0)
    above = dict.fromkeys(batches, 0)
    oom: set[int] = set()
    try:
        for _ in range(repeats):
            for n in batches:
                if any(n >= m for m in oom):
                    continue
                batch = requests(prompts, n, max_new_tokens)
                engine.max_batch_size = n
                before = 0
                if cuda:
                    torch.cuda.reset_peak_memory_stats(device)
                    before = torch.cuda.memory_allocated(device)
                sync()
                began = time.perf_counter()
                try:
                    out = engine.synthesize(batch)
                except torch.cuda.OutOfMemoryError:
                    oom.add(n)
                    torch.cuda.empty_cache()
                    continue
                sync()
                walls[n].append(time.perf_counter() - began)
                audio[n].append(sum(w.size for w in out) / engine.sample_rate)
                empty[n] += sum(1 for w in out if w.size == 0)
                if calls.get(n, (n,)) == (n,):  # keep a split call if any repeat had one
                    calls[n] = engine.last_calls
                if cuda:
                    peak[n] = max(peak[n], torch.cuda.max_memory_allocated(device))
                    above[n] = max(above[n], torch.cuda.max_memory_allocated(device) - before)
    finally:
        engine.max_batch_size = configured
    rows = []
    for n in batches:
        if any(n >= m for m in oom):
            rows.append(BatchRow(n, 0.0, 0.0, 0.0, (), 0, None, None, oom=True))
            continue
        rows.append(
            BatchRow(
                batch=n,
                wall_s=statistics.median(walls[n]),
                wall_spread=(max(walls[n]) - min(walls[n])) / statistics.median(walls[n]),
                audio_s=statistics.median(audio[n]),
                calls=calls[n],
                empty=empty[n],
                peak_mib=peak[n] / 2**20 if cuda else None,
                above_mib=above[n] / 2**20 if cuda else None,
            )
        )
    return rows


def measure_seed_cost(
    engine: Qwen3Engine,
    device: str,
    prompts: Sequence[SpeakerPrompt],
    batch: int,
    *,
    repeats: int = REPEATS,
    max_new_tokens: int = MAX_NEW_TOKENS,
) -> SeedCost:
    """Time ``generate_voice_clone`` on one batch with per-row generators (as Tome renders) and with the
    one global random stream (qwen_tts as shipped), alternating. The two sample different tokens, so
    rows stop at different lengths: each call's wall is divided by the frames its longest row ran."""
    import torch

    from worker.engines.row_sampling import seeded_rows

    model = engine.model
    batch_requests = requests(prompts, batch, max_new_tokens)
    items = [engine.prompt_item(r.prompt) for r in batch_requests]
    languages = [engine.language_name(r.language) for r in batch_requests]
    frame = engine.sample_rate / 12.5  # samples per codec frame

    def one(seeded: bool) -> float:
        guard = (
            seeded_rows([r.seed for r in batch_requests], model.device)
            if seeded
            else contextlib.nullcontext()
        )
        torch.manual_seed(0)
        began = time.perf_counter()
        with guard:
            wavs, _ = model.generate_voice_clone(
                text=[r.text for r in batch_requests],
                language=languages,
                voice_clone_prompt=items,
                max_new_tokens=max_new_tokens,
            )
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)
        frames = max(1.0, max(len(w) for w in wavs) / frame)
        return (time.perf_counter() - began) * 1000 / frames

    shared, seeded = [], []
    for _ in range(repeats):
        shared.append(one(False))
        seeded.append(one(True))
    return SeedCost(batch, statistics.median(shared), statistics.median(seeded))


def measure_checkpoint(
    model_dir: Path,
    device: str,
    label: str,
    batches: Sequence[int],
    *,
    repeats: int = REPEATS,
    max_new_tokens: int = MAX_NEW_TOKENS,
) -> CheckpointRun:
    """Load ``model_dir`` on ``device``, encode the two voices, measure every batch size."""
    began = time.perf_counter()
    engine = Qwen3Engine(model_dir, device=device)
    _ = engine.model  # load (once per process)
    load_s = time.perf_counter() - began
    began = time.perf_counter()
    sr = engine.sample_rate
    prompts = [engine.encode_speaker(reference(f0, sr), sr, text) for f0, text in VOICES]
    encode_s = time.perf_counter() - began
    rows = measure_batches(engine, device, prompts, batches, repeats=repeats, max_new_tokens=max_new_tokens)
    fitted = [row.batch for row in rows if not row.oom and row.batch <= SEED_COST_BATCH]
    seeds = (
        measure_seed_cost(
            engine, device, prompts, max(fitted), repeats=repeats, max_new_tokens=max_new_tokens
        )
        if fitted
        else None
    )
    return CheckpointRun(label, engine.version, load_s, encode_s, rows, seeds)


def check(run: CheckpointRun) -> list[str]:
    problems = []
    for row in run.rows:
        if row.oom:
            continue
        if row.empty:
            problems.append(f"qwen3 {run.label}: batch {row.batch}: {row.empty} request(s) rendered no audio")
        if row.calls != (row.batch,):
            problems.append(
                f"qwen3 {run.label}: batch {row.batch} ran as generate calls of {list(row.calls)} rows, "
                f"expected one of {row.batch} (is Qwen3Engine.max_batch_size honoured?)"
            )
    return problems


def _memory(row: BatchRow) -> str:
    if row.peak_mib is None or row.above_mib is None:
        return "n/a (cpu)"
    return f"{row.peak_mib:8.0f} MiB (+{row.above_mib:.0f})"


def report(run: CheckpointRun, device: str, repeats: int) -> None:
    digest = run.version.rsplit("/", 1)[-1][:12]
    what = (
        "the tests' checkpoint, random weights: its audio is noise" if run.label == "tiny" else "checkpoint"
    )
    print(
        f"  {run.label} ({what}) {digest}: loaded in {run.load_s:.1f} s, "
        f"2 voices encoded in {run.encode_s:.2f} s, on {device}"
    )
    base = run.rows[0] if run.rows and not run.rows[0].oom else None
    vs = f"vs n={base.batch}" if base else "vs n=-"
    print(
        f"      n   wall s  spread   audio s  audio/wall  RTF/request  {vs}  rows/call  "
        "peak mem (+ above idle)"
    )
    for row in run.rows:
        if row.oom:
            print(f"    {row.batch:3d}   out of memory (larger sizes not tried)")
            continue
        gain = f"{row.throughput / base.throughput:.2f}x" if base and base.throughput > 0 else "-"
        calls = "+".join(str(c) for c in row.calls)
        print(
            f"    {row.batch:3d} {row.wall_s:8.3f} {row.wall_spread:6.0%} {row.audio_s:9.2f} "
            f"{row.throughput:10.1f}x {row.rtf:12.3f} {gain:>7} {calls:>10}  {_memory(row)}"
        )
    done = [row for row in run.rows if not row.oom]
    if base is not None and len(done) > 1:
        top = done[-1]
        line = (
            f"  ratios       n={top.batch} vs n={base.batch}: "
            f"throughput {top.throughput / base.throughput:.2f}x, wall {top.wall_s / base.wall_s:.2f}x, "
            f"RTF/request {top.rtf / base.rtf:.2f}x"
        )
        if top.above_mib is not None and base.above_mib is not None:
            extra = (top.above_mib - base.above_mib) / (top.batch - base.batch)
            line += f", {extra:+.0f} MiB per extra request"
        print(line)
    if run.seeds is not None:
        c = run.seeds
        print(
            f"  seeds        n={c.batch}: per-chunk seeds {c.seeded_ms:.2f} ms/frame, "
            f"one shared random stream {c.shared_ms:.2f} ms/frame: {c.ratio:.2f}x"
        )
    print(
        f"  median of {repeats} calls per size; spread = (slowest - fastest) / median; "
        "RTF/request = wall / audio of one request"
    )


def _summary(run: CheckpointRun) -> str:
    done = [row for row in run.rows if not row.oom]
    if not done:
        return f"{run.label}: oom"
    parts = [f"{run.label}:"] + [f"thr{row.batch}={row.throughput:.1f}x" for row in (done[0], done[-1])]
    if len(done) > 1 and done[0].throughput > 0:
        parts.append(
            f"n{done[-1].batch}_over_n{done[0].batch}={done[-1].throughput / done[0].throughput:.2f}x"
        )
    if done[-1].peak_mib is not None:
        parts.append(f"peak{done[-1].batch}={done[-1].peak_mib:.0f}MiB")
    if len(done) < len(run.rows):
        parts.append(f"oom_at={run.rows[len(done)].batch}")
    if run.seeds is not None:
        parts.append(f"seeds_cost{run.seeds.batch}={run.seeds.ratio:.2f}x")
    return " ".join(parts)


def resolve_device(choice: str) -> tuple[str | None, str]:
    """The device to run on, or None and the line that says why the section is skipped."""
    if choice == "skip":
        return None, "[qwen3] skipped (--qwen3-device skip)"
    try:
        import torch
    except ImportError as exc:
        return None, f"[qwen3] skipped: torch is not importable ({exc}); install the qwen3 extra"
    if choice != "cpu" and not torch.cuda.is_available():
        if choice == "cuda":
            raise EngineError("--qwen3-device cuda, but torch.cuda.is_available() is False")
        return None, (
            f"[qwen3] skipped: no CUDA device (torch {torch.__version__}, cuda.is_available() is False); "
            f"run it on the CPU by hand with: {CPU_HINT}"
        )
    banner = io.StringIO()
    try:
        with contextlib.redirect_stdout(banner):  # qwen_tts prints a flash-attn banner on import
            import_qwen_tts()
    except ImportError as exc:
        return None, f"[qwen3] skipped: qwen_tts is not importable ({exc}); install the qwen3 extra"
    return ("cuda:0" if choice != "cpu" else "cpu"), banner.getvalue()


def run_section(
    choice: str, batches: Sequence[int], scratch: Path, *, repeats: int = REPEATS
) -> tuple[list[str], str]:
    """The section: the problems found and the summary part ("" when skipped)."""
    try:
        device, note = resolve_device(choice)
    except EngineError as exc:
        print(f"[qwen3] not run: {exc}")
        return [f"qwen3: {exc}"], ""
    if device is None:
        print(note)
        return [], ""
    from tests.qwen3.tiny_checkpoint import build_tiny_checkpoint

    print(
        f"[qwen3] qwen3-tts batches of n = {', '.join(map(str, batches))} requests, "
        f"engine.max_batch_size = n, on {device}"
    )
    print(
        f"  2 voices alternating, max_new_tokens={MAX_NEW_TOKENS}, seed i for request i; one warm-up call, "
        f"then {repeats} calls per size; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    if "flash-attn is not installed" in note:
        print("  note         flash-attn is not installed: qwen_tts runs its manual PyTorch attention")
    checkpoints = [("tiny", build_tiny_checkpoint(scratch / "qwen3-tiny"))]
    real = load_settings().engines.qwen3.model_dir
    if real:
        checkpoints.append((Path(real).name or real, Path(real)))
    else:
        print(
            "  (set TOME_QWEN3_MODEL_DIR to a checkpoint, e.g. Qwen3-TTS-12Hz-0.6B-Base, to measure it too)"
        )
    problems: list[str] = []
    parts: list[str] = []
    for label, model_dir in checkpoints:
        try:
            run = measure_checkpoint(model_dir, device, label, batches, repeats=repeats)
        except EngineError as exc:
            print(f"  {label}: {exc}")
            problems.append(f"qwen3 {label}: {exc}")
            continue
        report(run, device, repeats)
        problems += check(run)
        parts.append(_summary(run))
    print()
    return problems, f"qwen3[{device}] " + " ".join(parts) if parts else ""


if __name__ == "__main__":  # the runners side by side: bench/qwen3_runners.py
    import sys

    from bench.qwen3_runners import main

    sys.exit(main())
