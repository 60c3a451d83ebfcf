"""Write a sample reference recording (espeak at a chosen pitch and rate) to try Tome without a microphone.

    .venv/bin/python scripts/sample_reference.py sample.wav [--pitch-hz 180] [--wpm 150]

Prints the transcript to pass as ``ref_text``.
"""

from __future__ import annotations

import argparse

import numpy as np

from worker.audio import write_wav_atomic
from worker.engines import SynthesisRequest, get_engine

TRANSCRIPT = (
    "The old lighthouse keeper climbed the stairs every evening, counting each step, "
    "and watched the ships pass slowly beyond the harbour wall."
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--pitch-hz", type=float, default=180.0)
    parser.add_argument("--wpm", type=float, default=150.0)
    args = parser.parse_args()
    engine = get_engine("espeak")
    prompt = {
        "f0_median_hz": np.array([args.pitch_hz], dtype=np.float32),
        "words_per_minute": np.array([args.wpm], dtype=np.float32),
    }
    [wave] = engine.synthesize([SynthesisRequest(TRANSCRIPT, prompt)])
    write_wav_atomic(args.out, wave, engine.sample_rate)
    print(TRANSCRIPT)


if __name__ == "__main__":
    main()
