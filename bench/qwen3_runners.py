"""The qwen3-tts runners side by side: Tome's fast loop against qwen-tts's generate, per batch size.

``python -m bench.qwen3 --model-dir DIR --device cpu|cuda --runner fast,reference --batches 1,4,16
--frames N --json OUT`` (without ``--model-dir``: the tests' tiny random checkpoint, built in a temp dir).
Runners: ``fast`` and ``reference`` (``TOME_QWEN3_RUNNER``), and ``fast-compiled``, the fast runner with
its step through ``torch.compile`` (``Qwen3Engine.compile_loop``). For each runner and batch size n: one
engine with ``max_batch = n`` and ``max_new_tokens = N``, one untimed first call at every n (its seconds
are ``first_call_s``: allocations, and for ``fast-compiled`` the compile), then ``--repeats`` timed
``synthesize`` calls of n requests (two voices alternating, request i always the same text and seed), the
median kept. The runners and sizes are interleaved in each repeat, so all see the same machine. Figures
per row:

- ``ms_per_frame``: wall milliseconds per generated frame of one stream: wall / the frames of the call's
  longest request (a batch runs until its longest row ends, in both runners);
- ``audio_s_per_wall_s``: seconds of audio of all n requests per second of wall;
- ``rtf``: wall / (audio / n), the real-time factor one request sees;
- ``first_audio_s``: for n = 1, seconds until the first audio of a request is in hand (the fast runner
  streams it, the reference has it only at the end); null for n > 1;
- ``peak_mib``: on CUDA the peak allocated memory of the calls, on a CPU the process's peak resident size.

Random weights may end a row early (end of speech is a token like any other, and the two runners sample
different noise): the per-frame figures divide by the longest row's frames, the steps the call took, but
the runners' rows then differ in length, and the codec decoder's share (which includes each row's
reference codes) differs with them. ``--greedy`` makes both runners decode greedily (qwen-tts's generate
defaults): they then make the same frames, so the timed work is the same (the reference skips its sampling
processors then, which favours it).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.qwen3 import parse_batches, reference, requests
from worker.engines.qwen3 import RUNNERS, Qwen3Engine, import_qwen_tts

FRAMES_PER_SECOND = 12.5
COMPILED = "fast-compiled"  # the fast runner with its step through torch.compile (Qwen3Engine.compile_loop)
BENCH_RUNNERS = (*RUNNERS, COMPILED)


@dataclass(frozen=True)
class RunnerRow:
    runner: str
    n: int
    ms_per_frame: float
    audio_s_per_wall_s: float
    rtf: float
    first_audio_s: float | None
    peak_mib: float
    wall_s: float
    frames: int  # frames of the longest request of a call (median call): the steps every row waits for
    generate_ms_per_frame: float  # ms_per_frame without the codec decoder's share
    first_call_s: float  # the untimed first call at this n (allocations; for fast-compiled, the compile)


def parse_runners(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [name for name in names if name not in BENCH_RUNNERS]
    if not names or unknown:
        raise ValueError(f"runners are a comma-separated subset of {', '.join(BENCH_RUNNERS)}, not {text!r}")
    return names


def _peak_mib(device: str) -> float:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _first_audio(engine: Qwen3Engine, request: object, sync: object) -> float:
    began = time.perf_counter()
    stream = engine.synthesize_stream(request)  # type: ignore[arg-type]
    next(stream)
    sync()  # type: ignore[operator]
    elapsed = time.perf_counter() - began
    for _ in stream:  # finish it: the engine's lock is held while it runs
        pass
    return elapsed


@contextlib.contextmanager
def _decode_timer(engine: Qwen3Engine) -> Iterator[list[float]]:
    """Seconds the call spends in the codec decoder (qwen-tts's speech tokenizer's, which both runners use:
    the reference through its ``decode``, the fast runner through the decoder module's forward on a GPU
    and piece by piece through ``CodecState`` on a CPU)."""
    from worker.engines.qwen3_codec import CodecState  # torch: imported when a bench runs

    spent = [0.0]
    tokenizer = engine.model.model.speech_tokenizer
    decoder = tokenizer.model.decoder
    original = decoder.forward
    piecewise = CodecState.decode

    def timer(call: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - began

        return timed

    decoder.forward = timer(original)
    CodecState.decode = timer(piecewise)  # type: ignore[method-assign]
    try:
        yield spent
    finally:
        del decoder.forward  # the instance attribute; the class's forward shows through again
        CodecState.decode = piecewise  # type: ignore[method-assign]


def _engine(model_dir: Path, device: str, frames: int, name: str, greedy: bool) -> Qwen3Engine:
    engine = Qwen3Engine(
        model_dir, device=device, max_new_tokens=frames, runner="fast" if name == COMPILED else name
    )
    engine.compile_loop = name == COMPILED
    if greedy:
        engine.model.generate_defaults.update(do_sample=False, subtalker_dosample=False)
    return engine


def _warm_up(
    engines: dict[str, Qwen3Engine],
    prompts: Sequence[Any],
    batches: Sequence[int],
    frames: int,
    sync: Any,
) -> tuple[dict[tuple[str, int], float], dict[str, float]]:
    """One untimed call per runner and n (allocations, kernels, graphs, compiles), its seconds; then, when
    n = 1 is measured, each runner's time to first audio."""
    first_calls: dict[tuple[str, int], float] = {}
    firsts: dict[str, float] = {}
    for name, engine in engines.items():
        for n in batches:
            engine.max_batch_size = n
            began = time.perf_counter()
            engine.synthesize(requests(prompts, n, frames))
            first_calls[(name, n)] = time.perf_counter() - began
        if 1 in batches:
            firsts[name] = _first_audio(engine, requests(prompts, 1, frames)[0], sync)
    return first_calls, firsts


def compare(
    model_dir: Path,
    device: str,
    runners: Sequence[str],
    batches: Sequence[int],
    frames: int,
    *,
    repeats: int = 3,
    greedy: bool = False,
) -> list[RunnerRow]:
    """One :class:`RunnerRow` per (runner, batch size), in that order; ``greedy``: both runners decode
    greedily (qwen-tts's generate defaults), so they make the same frames: the same work to time."""
    import torch

    cuda = device.startswith("cuda")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    engines = {name: _engine(model_dir, device, frames, name, greedy) for name in runners}
    first = engines[runners[0]]
    rate = 16_000
    prompts = [
        first.encode_speaker(reference(110.0, rate), rate, "Hello there, this is a low voice."),
        first.encode_speaker(reference(220.0, rate), rate, "And this one is a higher voice."),
    ]
    walls: dict[tuple[str, int], list[float]] = {}
    decoding: dict[tuple[str, int], list[float]] = {}
    produced: dict[tuple[str, int], list[tuple[float, int]]] = {}
    first_calls, firsts = _warm_up(engines, prompts, batches, frames, sync)
    for _ in range(repeats):
        for n in batches:
            for name, engine in engines.items():
                engine.max_batch_size = n
                batch = requests(prompts, n, frames)
                if cuda:
                    torch.cuda.reset_peak_memory_stats(device)
                with _decode_timer(engine) as decode_s:
                    sync()
                    began = time.perf_counter()
                    out = engine.synthesize(batch)
                    sync()
                walls.setdefault((name, n), []).append(time.perf_counter() - began)
                decoding.setdefault((name, n), []).append(decode_s[0])
                samples = sum(w.size for w in out)
                steps = round(max(w.size for w in out) / engine.sample_rate * FRAMES_PER_SECOND)
                produced.setdefault((name, n), []).append((samples / engine.sample_rate, steps))
    rows = []
    for name in runners:
        for n in batches:
            wall = statistics.median(walls[(name, n)])
            decode = statistics.median(decoding[(name, n)])
            audio = statistics.median(a for a, _ in produced[(name, n)])
            steps = int(statistics.median(f for _, f in produced[(name, n)]))
            per_stream = max(steps, 1e-9)
            rows.append(
                RunnerRow(
                    runner=name,
                    n=n,
                    ms_per_frame=wall * 1000 / per_stream,
                    audio_s_per_wall_s=audio / wall if wall > 0 else 0.0,
                    rtf=wall / (audio / n) if audio > 0 else float("inf"),
                    first_audio_s=firsts.get(name) if n == 1 else None,
                    peak_mib=_peak_mib(device),
                    wall_s=wall,
                    frames=steps,
                    generate_ms_per_frame=(wall - decode) * 1000 / per_stream,
                    first_call_s=first_calls[(name, n)],
                )
            )
    return rows


def table(rows: Sequence[RunnerRow]) -> str:
    lines = [
        "| runner | n | ms per frame | without decoder | audio s per wall s | RTF | first audio s "
        "| peak MiB | first call s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        first = "" if row.first_audio_s is None else f"{row.first_audio_s:.3f}"
        lines.append(
            f"| {row.runner} | {row.n} | {row.ms_per_frame:.1f} | {row.generate_ms_per_frame:.1f} | "
            f"{row.audio_s_per_wall_s:.2f} | "
            f"{row.rtf:.2f} | {first} | {row.peak_mib:.0f} | {row.first_call_s:.1f} |"
        )
    return "\n".join(lines)


def speedups(rows: Sequence[RunnerRow]) -> dict[tuple[str, int], tuple[float, float]]:
    """(reference / runner ms per frame, the same without the decoder), per runner other than the
    reference and batch size measured with both."""
    by = {(r.runner, r.n): r for r in rows}
    out = {}
    for (runner, n), fast in by.items():
        if runner != "reference" and ("reference", n) in by:
            ref = by[("reference", n)]
            out[(runner, n)] = (
                ref.ms_per_frame / max(fast.ms_per_frame, 1e-9),
                ref.generate_ms_per_frame / max(fast.generate_ms_per_frame, 1e-9),
            )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.qwen3", description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", type=Path, help="a Qwen3-TTS Base checkpoint (default: the tiny one)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument("--runner", default="fast,reference", type=parse_runners)
    parser.add_argument("--batches", default="1,4,16", type=parse_batches)
    parser.add_argument("--frames", default=48, type=int, help="max_new_tokens of every request")
    parser.add_argument("--repeats", default=3, type=int)
    parser.add_argument("--json", type=Path, help="write {'rows': [...]} here")
    parser.add_argument(
        "--greedy", action="store_true", help="greedy decoding: both runners make the same frames"
    )
    args = parser.parse_args(argv)
    with contextlib.redirect_stdout(io.StringIO()):  # qwen_tts prints a flash-attn banner on import
        import_qwen_tts()
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = args.model_dir
        if model_dir is None:
            from tests.qwen3.tiny_checkpoint import build_tiny_checkpoint

            model_dir = build_tiny_checkpoint(Path(scratch) / "tiny")
        rows = compare(
            model_dir,
            args.device,
            args.runner,
            args.batches,
            args.frames,
            repeats=args.repeats,
            greedy=args.greedy,
        )
    print(
        f"qwen3 runners on {args.device}, {model_dir.name}, {args.frames} frames a request"
        f"{', greedy' if args.greedy else ', sampled'}, load "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, median of {args.repeats}"
    )
    print(table(rows))
    for (runner, n), (whole, loop) in speedups(rows).items():
        print(
            f"n={n}: {runner} is {whole:.1f}x faster per frame than reference "
            f"({loop:.1f}x without the decoder)"
        )
    if args.json:
        args.json.write_text(json.dumps({"rows": [asdict(r) for r in rows]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
