"""How close the pitch a voice's prompt is read with (``worker.jobs.quality.calibrated_pitch``, what a
job's first chunks are held to) is to the median the job learns from its chunks, and how many clean
chunks fail the pitch check against it: ``python -m bench.pitch_calibration [--chunks N] [--seeds 7 21]``.

Clean espeak chunks of generated books (``bench.qa``'s script) read by the QA bench's four voices and three
more with wide and narrow pitch ranges; nothing is injected."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

from bench.qa import VOICES, _prompt, script_chunks
from worker.engines.base import SynthesisRequest
from worker.engines.espeak import EspeakEngine
from worker.jobs.quality import calibrated_pitch
from worker.qa.checks import check_audio, median_f0, policy_for

EXTRA_VOICES = {
    "wide_low": _prompt(100.0, 9.0, 170.0),
    "wide_high": _prompt(220.0, 9.0, 170.0),
    "flat_high": _prompt(300.0, 2.0, 190.0),
}


def run(chunks: int, seeds: Sequence[int]) -> list[str]:
    engine = EspeakEngine()
    policy = policy_for(engine.name)
    lines = ["seed  voice      calibrated  learnt  offset (st)  pitch failures"]
    for seed in seeds:
        texts = [c.text for c in script_chunks(chunks, seed)]
        for name, prompt in {**VOICES, **EXTRA_VOICES}.items():
            calibrated = calibrated_pitch(engine, SynthesisRequest("", prompt, "en", {}, seed=0), name)
            assert calibrated is not None
            results = [
                check_audio(wave, engine.sample_rate, text, policy=policy, expected_f0_hz=calibrated)
                for wave, text in zip(
                    engine.synthesize([SynthesisRequest(t, prompt, "en", {}, seed=0) for t in texts]),
                    texts,
                    strict=True,
                )
            ]
            learnt = median_f0(r.f0_median_hz for r in results) or calibrated
            failed = sum(1 for r in results if (c := r.check("pitch")) is not None and not c.passed)
            offset = 12 * math.log2(learnt / calibrated)
            lines.append(
                f"{seed:4d}  {name:<9}  {calibrated:8.1f} Hz  {learnt:6.1f}  {offset:+10.2f}  "
                f"{failed} of {len(results)}"
            )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.pitch_calibration", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--chunks", type=int, default=150)
    parser.add_argument("--seeds", type=int, nargs="+", default=[7, 21])
    args = parser.parse_args(argv)
    print("\n".join(run(args.chunks, args.seeds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
