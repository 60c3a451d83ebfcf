"""The Qwen3-TTS streamed codec decode: what decoding costs per generated frame, pushed as the loop pushes.

``python -m bench.qwen3_stream [--model-dir DIR] [--frames N] [--prefix P] [--repeats R]``: random codes
(N generated frames after P frames standing for the reference's codes), decoded

- ``whole``: in one pass as qwen-tts decodes (windows of 300 frames with 25 of context), the floor;
- ``stream``: pushed one frame at a time into a :class:`StreamDecoder` with its default hand-out policy;
- ``stream-every-1``: the same, handing audio out after every frame;
- ``stream-kept-prefix``: as ``stream``, from the decoder state kept after the prefix (a voice's second
  chunk: :class:`PrefixStates`, filled before the timing).

Each is the median of R runs, in ms of decode per generated frame, with the seconds to the first audio
(pushing frames costs nothing but the decode, so this is the decoder's share of first audio).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from worker.engines.qwen3 import Qwen3Engine
from worker.engines.qwen3_stream import EVERY_FRAMES, PrefixStates, StreamDecoder, decode_whole


def _stream(
    decoder: Any,
    upsample: int,
    codes: torch.Tensor,
    prefix: int,
    states: PrefixStates | None = None,
    every: int = EVERY_FRAMES,
) -> float:
    """Seconds to the first audio; the whole run is timed by the caller."""
    start = time.perf_counter()
    stream = StreamDecoder(decoder, upsample, codes[:prefix], every=every, states=states)
    first = 0.0
    for i in range(prefix, codes.shape[0]):
        if stream.push(codes[i : i + 1]).size and not first:
            first = time.perf_counter() - start
    stream.finish()
    return first


def measure(model_dir: Path, frames: int, prefix: int, repeats: int) -> list[tuple[str, float, float]]:
    with contextlib.redirect_stdout(io.StringIO()):  # qwen_tts prints a flash-attn banner on import
        engine = Qwen3Engine(model_dir, device="cpu")
    decoder, upsample = engine._decoder()
    quantizers = int(decoder.config.num_quantizers)
    codes = torch.randint(0, 64, (prefix + frames, quantizers), generator=torch.Generator().manual_seed(1))
    cases: dict[str, Callable[[], float]] = {
        "whole": lambda: decode_whole(decoder, upsample, codes, prefix).size * 0.0,
        "stream": lambda: _stream(decoder, upsample, codes, prefix),
    }
    cases["stream-every-1"] = lambda: _stream(decoder, upsample, codes, prefix, every=1)
    states = PrefixStates(decoder)
    with torch.inference_mode():
        states.after(codes[:prefix])
    cases["stream-kept-prefix"] = lambda: _stream(decoder, upsample, codes, prefix, states)
    times: dict[str, list[float]] = {name: [] for name in cases}
    firsts: dict[str, list[float]] = {name: [] for name in cases}
    with torch.inference_mode():
        for _ in range(repeats):  # the cases interleaved, so load drifts hit them alike
            for name, case in cases.items():
                start = time.perf_counter()
                firsts[name].append(case())
                times[name].append(time.perf_counter() - start)
    return [
        (name, 1000 * statistics.median(times[name]) / frames, statistics.median(firsts[name]))
        for name in cases
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.qwen3_stream", description=__doc__)
    parser.add_argument("--model-dir", type=Path, help="a Qwen3-TTS Base checkpoint (default: the tiny one)")
    parser.add_argument("--frames", type=int, default=600)
    parser.add_argument("--prefix", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = args.model_dir
        if model_dir is None:
            from tests.qwen3.tiny_checkpoint import build_tiny_checkpoint

            model_dir = build_tiny_checkpoint(Path(scratch) / "tiny-base")
        rows = measure(model_dir, args.frames, args.prefix, args.repeats)
    print(
        f"codec decode, {args.frames} frames pushed one at a time after {args.prefix} of prefix, "
        f"median of {args.repeats}, torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    for name, ms, first in rows:
        first_text = f"  first audio {first * 1000:.0f} ms" if first else ""
        print(f"  {name:<18} {ms:7.2f} ms/frame{first_text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
