"""The speaker-prompt cache, measured: the shared counters, and what a hit costs against an encode.

Timings are medians of single calls (``time.perf_counter``), all in the process that rendered the job, so
the prompt is in its LRU; calls compared with each other are interleaved (see :func:`medians`):

- hit: ``load_voice_prompt`` on a cached voice. What a render task pays: a SELECT of the voice row, the
  LRU lookup (a copy of the arrays) and the upsert of the hit counter;
- counter upsert: one ``counters.add`` alone, on a probe counter (the part of a hit that writes);
- LRU get: ``PromptLru.get`` alone;
- file read: ``load_prompt`` of the voice's prompt file (what a miss pays on top of the SELECT);
- encode: ``engine.encode_speaker`` on the reference (the analysis a build runs);
- build: ``read_wav`` + encode + ``save_prompt`` (fsync'd, atomic) to a scratch file: a build's own work,
  without the compare-and-set and publish UPDATEs around it.

None of these calls goes through ``compute_prompt``, so the encode count in the counters stays the job's.
The hit timing does add its calls to the hit counter; the figures of the job are read before it, and the
difference afterwards is checked to be exactly the timed calls (proof that every one of them was a hit).
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from models import Voice
from worker import counters
from worker.audio import read_wav
from worker.runtime import Runtime
from worker.voices import prompts as voice_prompts
from worker.voices.store import load_prompt, save_prompt

HIT_REPEATS = 50
LRU_REPEATS = 1000
ENCODE_REPEATS = 10
PROBE_COUNTER = "tome_bench_probe_total"


@dataclass(frozen=True)
class CacheCounts:
    builds: int
    misses: int
    hits: int


@dataclass(frozen=True)
class CacheTimings:
    hit_ms: float
    upsert_ms: float  # one counter upsert alone (a hit pays one)
    lru_get_us: float
    file_read_ms: float
    encode_ms: float
    build_ms: float
    hits_counted: int  # how many of the timed hit calls the hit counter recorded


def read_counts(rt: Runtime) -> CacheCounts:
    """The cache counters (summed over engines) from the database, as ``GET /metrics`` reports them."""
    with rt.sessions() as session:
        values = counters.read_all(session)

    def total(name: str) -> int:
        return round(sum(v for (n, _engine), v in values.items() if n == name))

    return CacheCounts(total(counters.BUILDS), total(counters.MISSES), total(counters.HITS))


def reset_process_lru() -> None:
    """Forget this process's prompt LRU, so that the first load of the run is a miss."""
    voice_prompts._lru = None


def medians(calls: Sequence[Callable[[], object]], repeats: int) -> list[float]:
    """Median seconds of single calls of each of ``calls``, run round-robin so that all of them see the
    same machine (other processes, CPU frequency) rather than one of them a quieter moment."""
    samples: list[list[float]] = [[] for _ in calls]
    for _ in range(repeats):
        for call, times in zip(calls, samples, strict=True):
            began = time.perf_counter()
            call()
            times.append(time.perf_counter() - began)
    return [statistics.median(times) for times in samples]


def measure(rt: Runtime, voice_id: uuid.UUID, scratch: Path) -> CacheTimings:
    """Time a hit, an LRU get, a prompt file read, an encode and a build, in this process."""
    engine = rt.engine()
    with rt.sessions() as session:
        voice = session.get(Voice, voice_id)
        if voice is None or not voice.cache_path:
            raise RuntimeError(f"voice {voice_id} has no prompt to measure")
        key, prompt_file = voice_prompts.key_for(voice, engine), Path(voice.cache_path)
        audio_path, ref_text = voice.audio_path, voice.ref_text
    lru = voice_prompts.process_lru(rt.settings.voices.cache_max_bytes)
    if lru.get(key) is None:
        raise RuntimeError("the voice's prompt is not in this process's LRU; a hit cannot be timed")

    def hit() -> None:
        voice_prompts.load_voice_prompt(rt, voice_id)

    def upsert() -> None:  # the write a hit pays, on a counter of its own (this is a throwaway database)
        counters.add(rt.sessions, "bench", {PROBE_COUNTER: 1})

    def file_read() -> None:
        load_prompt(prompt_file, engine.prompt_shapes)

    before = read_counts(rt)
    hit_s, upsert_s, file_s = medians([hit, upsert, file_read], HIT_REPEATS)
    after = read_counts(rt)
    if after.misses != before.misses or after.builds != before.builds:
        raise RuntimeError("a timed cache hit missed or built; the hit timing would be wrong")
    [lru_s] = medians([lambda: lru.get(key)], LRU_REPEATS)

    samples, rate = read_wav(audio_path)
    target = scratch / "prompt.safetensors"

    def encode() -> None:
        engine.encode_speaker(samples, rate, ref_text)

    def build() -> None:
        wave, sample_rate = read_wav(audio_path)
        tensors = engine.encode_speaker(wave, sample_rate, ref_text)
        save_prompt(target, tensors, {"cache_key": key, "voice_id": str(voice_id)})

    encode_s, build_s = medians([encode, build], ENCODE_REPEATS)
    return CacheTimings(
        hit_ms=hit_s * 1e3,
        upsert_ms=upsert_s * 1e3,
        lru_get_us=lru_s * 1e6,
        file_read_ms=file_s * 1e3,
        encode_ms=encode_s * 1e3,
        build_ms=build_s * 1e3,
        hits_counted=after.hits - before.hits,
    )
