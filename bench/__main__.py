"""``make bench``: how fast a whole novel is previewed; then one voice, one 200-chunk job, and what the
speaker-prompt cache does and saves.

0. Preview (``bench/preview.py``; alone with ``--preview-only``): a generated 100,000-word novel
   (``--preview-words``) through ``POST /v1/scripts/preview`` as Markdown and as an EPUB upload: words per
   second, and the cost of normalisation and lexicons over the parse and chunking alone.
1. In-process: the real pipeline functions (build_voice, start_job, render_chunks, stitch_job) on an
   embedded SQLite database in a temp dir, messages delivered by a synchronous local queue (one process).
   Counts the encodes, prompt file reads and cache hits of the job from the shared counters, then times a
   cache hit against an encode in the same process.
2. Real workers (skip with ``--workers 0``): the same job on a ``celery worker`` with that many pool
   processes, on the filesystem broker; counts again from the counters table.
3. Stitch (``bench/stitch.py``; ``--stitch-hours``, 0 skips it): hours of speech-like chunks stitched by
   Tome to MP3 and to M4B with chapters, beside pydub ``AudioSegment`` accumulation on the same chunks:
   peak memory and speed as a multiple of real time, each case in its own process.
   Storage (``bench/storage_stitch.py``; ``--storage-minutes``, 0 skips it): the same stitch's peak memory
   with the chunks and the book in an S3 bucket (moto's server) beside the local disk, on a book and one
   10x longer: memory must not grow with the book (each backend within 15% + 16 MB).
4. Chapters (``bench/chapters.py``; ``--chapters-words``, 0 skips it): a long multi-chapter book to MP3 on
   real workers, with espeak and with espeak-paced (a GPU's pace): time to first chapter, render time,
   the book's wall time and their ratio (issue 12's target: within 1.2x), from the database rows.
5. Speech (``bench/speech.py``; ``--speech-voices``, 0 skips it): time to the first audio byte of
   ``POST /v1/audio/speech`` on the embedded stack, with a voice whose prompt is not built yet (cold) and
   cached (warm); each voice encoded exactly once.
6. Orchestration (``bench/orchestration.py``; ``--orchestration-chunks``, 0 skips it): what Tome adds to
   every chunk on PostgreSQL + Redis with the ``constant`` engine (no engine cost): a 1,000-chunk job's
   milliseconds a chunk beside a bare Celery round trip on the same Redis, on 1, 2 and 4 worker
   processes; the API's submissions and status polls a second at 32 concurrent clients under gunicorn,
   and a 1,000,000-character script's submit latency and API memory. Skipped without the services.
7. qwen3-tts batches (``bench/qwen3.py``; on CUDA when there is a GPU, else skipped unless
   ``--qwen3-device cpu``): throughput, real-time factor, wall and peak GPU memory per batch size, on the
   tests' tiny checkpoint and on the one ``TOME_QWEN3_MODEL_DIR`` names.

Exits 1 if a preview did not answer 200 with every chapter, if the voice was encoded other than exactly
once, or a prompt file was read more often than there are processes rendering (the invariants this
benchmark guards), or a job did not succeed, or a qwen3 batch rendered a request without audio or not in
one generate call, or a chapters job did not succeed or had no chapter ready before the book, or a speech
request did not answer audio or a voice was encoded other than once, or an orchestration job did not succeed
or the API answered an error under load, or a stitch's memory grew with the book on either storage backend.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from bench import qwen3
from bench.chapters import WORDS as CHAPTER_WORDS
from bench.chapters import non_negative, run_chapters_bench
from bench.inprocess import Dispatch, run_messages
from bench.orchestration import CHUNKS as ORCHESTRATION_CHUNKS
from bench.orchestration import run_orchestration_bench
from bench.preview import WORDS, run_preview
from bench.scene import Scene, create_scene
from bench.speech import VOICES as SPEECH_VOICES
from bench.speech import run_speech_bench
from bench.stitch import run_stitch_bench
from bench.storage_stitch import run_storage_stitch_bench
from bench.voice_cache import (
    ENCODE_REPEATS,
    HIT_REPEATS,
    LRU_REPEATS,
    CacheCounts,
    CacheTimings,
    measure,
    read_counts,
    reset_process_lru,
)
from bench.workers import WorkerRun, run_with_workers
from models import Job
from worker import task_names


def _job(scene: Scene) -> Job:
    with scene.rt.sessions() as session:
        job = session.get(Job, scene.job_id)
        assert job is not None
        return job


def _check(label: str, counts: CacheCounts, processes: int, status: str, error: str | None) -> list[str]:
    problems = []
    if status != "succeeded":
        problems.append(f"{label}: the job ended {status}: {error}")
    if counts.builds != 1:
        problems.append(f"{label}: the voice was encoded {counts.builds} times, expected exactly 1")
    if counts.misses > processes:
        problems.append(
            f"{label}: a prompt file was read {counts.misses} times by {processes} process(es); "
            f"expected at most {processes}"
        )
    return problems


def _counts_line(counts: CacheCounts, processes: int) -> str:
    return (
        f"  voice cache  encodes={counts.builds} (expected 1)  file reads={counts.misses} "
        f"(at most {processes}: one per process)  hits={counts.hits}"
    )


def _rtf(audio: float, wall: float) -> float:
    return audio / wall if wall > 0 else 0.0


def report_inprocess(scene: Scene, run: Dispatch, counts: CacheCounts, t: CacheTimings) -> None:
    job = _job(scene)
    audio = job.output_duration or 0.0
    engine = scene.rt.engine()

    def task(name: str, label: str) -> str:
        n = run.tasks[name]
        return f"{label} {run.seconds[name]:.2f} s ({n} task{'' if n == 1 else 's'})"

    print(f"[in-process] {scene.chunks} chunks, 1 process: the real task bodies (worker.dispatch)")
    print("  on SQLite in a temp dir (kept with --keep), messages delivered by a synchronous local queue")
    print(
        f"  engine       {engine.name} {engine.version}, "
        f"{scene.settings.tasks.chunks_per_task} chunks per task"
    )
    print(
        f"  job          {job.status}, {job.chunks_done}/{job.chunks_total} chunks, "
        f"mp3 of {job.output_bytes} bytes"
    )
    print(
        f"  wall         {run.wall_seconds:.2f} s = {task(task_names.BUILD_VOICE, 'build')}, "
        f"{task(task_names.START_JOB, 'start')}, {task(task_names.RENDER_CHUNKS, 'render')}, "
        f"{task(task_names.STITCH_JOB, 'stitch')}; {run.waits} starts waited for a voice"
    )
    print(f"  audio        {audio:.1f} s, real-time factor {_rtf(audio, run.wall_seconds):.0f}x")
    print(_counts_line(counts, 1))
    print("  timings      median of N single calls, in this process, with the prompt in its LRU:")
    rows = [
        ("hit", t.hit_ms, HIT_REPEATS, "load_voice_prompt: voice SELECT + LRU get + hit counter upsert"),
        ("  upsert", t.upsert_ms, HIT_REPEATS, "of which one counter upsert (counters.add) is about"),
        ("LRU get", t.lru_get_us / 1e3, LRU_REPEATS, f"PromptLru.get alone ({t.lru_get_us:.1f} us)"),
        ("file read", t.file_read_ms, HIT_REPEATS, "load_prompt of the prompt file (what a miss reads)"),
        ("encode", t.encode_ms, ENCODE_REPEATS, "engine.encode_speaker on the reference"),
        ("build", t.build_ms, ENCODE_REPEATS, "read_wav + encode_speaker + save_prompt (fsync, rename)"),
    ]
    for label, ms, n, what in rows:
        print(f"    {label:<10} {ms:9.4f} ms  [N={n}]  {what}")
    print(
        f"  ratios       encode / hit = {t.encode_ms / t.hit_ms:.0f}x"
        f"   build / hit = {t.build_ms / t.hit_ms:.0f}x"
        f"   encode / LRU get = {t.encode_ms * 1e3 / t.lru_get_us:.0f}x"
        f"   file read / LRU get = {t.file_read_ms * 1e3 / t.lru_get_us:.0f}x"
    )
    print(f"  check        the {t.hits_counted} timed hits all counted as hits; no miss, no build")


def report_workers(run: WorkerRun, counts: CacheCounts, chunks: int) -> None:
    spread = ", ".join(f"{name} {n}" for name, n in sorted(run.chunks_by_process.items())) or "(not in log)"
    retries = ", ".join(f"{name} x{n}" for name, n in sorted(run.retries.items())) or "none"
    seen = run.seen
    phases = []
    if "running" in seen:
        phases.append(f"voice build + start {seen['running']:.2f} s")
        if "stitching" in seen:
            phases.append(f"render {seen['stitching'] - seen['running']:.2f} s")
    if "stitching" in seen:
        phases.append(f"stitch {run.wall_seconds - seen['stitching']:.2f} s")
    print(
        f"[celery workers] {chunks} chunks, 1 celery worker with {run.concurrency} pool processes (prefork),"
    )
    print(
        "  filesystem broker, SQLite; clock from sending build_voice + start_job (as the API does) to the end"
    )
    print(f"  worker start {run.startup_seconds:.2f} s before the clock (not counted)")
    print(f"  job          {run.status}; chunks rendered per pool process: {spread}")
    print(f"  wall         {run.wall_seconds:.2f} s = {', '.join(phases)} (status polled every 50 ms)")
    print(f"  retries      {retries} (transient failures only; a start that waits for a voice ends)")
    print(
        f"  audio        {run.audio_seconds:.1f} s, "
        f"real-time factor {_rtf(run.audio_seconds, run.wall_seconds):.0f}x"
    )
    print(_counts_line(counts, run.concurrency))


def _batches(text: str) -> tuple[int, ...]:
    try:
        return qwen3.parse_batches(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument("--chunks", type=int, default=200, help="chunks in the job (default 200)")
    parser.add_argument(
        "--workers", type=int, default=2, help="pool processes of the real-worker run; 0 skips it (default 2)"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the temp dir (databases, audio, worker log)"
    )
    parser.add_argument(
        "--preview-only", action="store_true", help="only the preview section (skip the render sections)"
    )
    parser.add_argument(
        "--preview-words",
        type=_positive,
        default=WORDS,
        metavar="N",
        help=f"words in the previewed novel (default {WORDS:,})",
    )
    parser.add_argument(
        "--stitch-hours",
        type=float,
        default=10.0,
        metavar="H",
        help="hours of chunks the stitch section masters and encodes; 0 skips it (default 10)",
    )
    parser.add_argument(
        "--storage-minutes",
        type=float,
        default=6.0,
        metavar="M",
        help="minutes of the storage section's short book (the long one is 10x), local disk and S3; "
        "0 skips it (default 6)",
    )
    parser.add_argument(
        "--chapters-words",
        type=non_negative,
        default=CHAPTER_WORDS,
        metavar="N",
        help=f"words in the chapters section's book; 0 skips it (default {CHAPTER_WORDS:,})",
    )
    parser.add_argument(
        "--speech-voices",
        type=non_negative,
        default=SPEECH_VOICES,
        metavar="N",
        help=f"voices whose speech is timed to the first byte; 0 skips it (default {SPEECH_VOICES})",
    )
    parser.add_argument(
        "--orchestration-chunks",
        type=non_negative,
        default=ORCHESTRATION_CHUNKS,
        metavar="N",
        help=f"chunks of the orchestration section's job; 0 skips it (default {ORCHESTRATION_CHUNKS:,})",
    )
    parser.add_argument(
        "--qwen3-device",
        choices=qwen3.DEVICE_CHOICES,
        default="auto",
        help="where the qwen3-tts batch section runs; auto: cuda if available, else skip (default auto)",
    )
    parser.add_argument(
        "--qwen3-batches",
        type=_batches,
        default=qwen3.DEFAULT_BATCHES,
        metavar="N,N,...",
        help=f"batch sizes of the qwen3-tts section (default {','.join(map(str, qwen3.DEFAULT_BATCHES))})",
    )
    args = parser.parse_args(argv)

    base = Path(tempfile.mkdtemp(prefix="tome-bench-"))
    try:
        print(f"[preview] a {args.preview_words:,}-word novel through POST /v1/scripts/preview")
        problems, timings = run_preview(base, args.preview_words)
        for line in timings.lines():
            print(line)
        summary = f"preview {timings.words} words in {timings.preview_s:.2f} s"
        if not args.preview_only:
            more, cache_summary = run(base, args.chunks, args.workers)
            problems += more
            summary = f"{cache_summary} | {summary}"
            if args.stitch_hours > 0:
                print(f"[stitch] {args.stitch_hours:g} hours of chunks, Tome beside pydub accumulation")
                stitch_problems, stitch_lines = run_stitch_bench(base / "stitch", args.stitch_hours)
                for line in stitch_lines:
                    print(line)
                problems += stitch_problems
            if args.storage_minutes > 0:
                print(
                    f"[storage] stitch memory, local disk and S3 (moto on 127.0.0.1): "
                    f"{args.storage_minutes:g} and {args.storage_minutes * 10:g} minutes"
                )
                storage_problems, storage_lines = run_storage_stitch_bench(args.storage_minutes)
                for line in storage_lines:
                    print(line)
                problems += storage_problems
            if args.chapters_words > 0:
                print(f"[chapters] time to first chapter: {args.chapters_words:,} words on real workers")
                chapter_problems, chapter_lines, chapter_summary = run_chapters_bench(
                    base / "chapters", args.chapters_words
                )
                for line in chapter_lines:
                    print(line)
                problems += chapter_problems
                summary += f" | {chapter_summary}"
            if args.speech_voices > 0:
                print(f"[speech] POST /v1/audio/speech, time to the first byte: {args.speech_voices} voices")
                speech_problems, speech_lines, speech_summary = run_speech_bench(
                    base / "speech", args.speech_voices
                )
                for line in speech_lines:
                    print(line)
                problems += speech_problems
                summary += f" | {speech_summary}"
            if args.orchestration_chunks > 0:
                print(
                    f"[orchestration] {args.orchestration_chunks:,} chunks on PostgreSQL + Redis, "
                    "no engine cost"
                )
                orch_problems, orch_lines, orch_summary = run_orchestration_bench(
                    base / "orchestration", args.orchestration_chunks
                )
                for line in orch_lines:
                    print(line)
                problems += orch_problems
                summary += f" | {orch_summary}"
            qwen3_problems, qwen3_summary = qwen3.run_section(args.qwen3_device, args.qwen3_batches, base)
            problems += qwen3_problems
            if qwen3_summary:
                summary += f" | {qwen3_summary}"
    finally:
        if args.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    for problem in problems:
        print(f"FAIL {problem}")
    print(summary)
    return 1 if problems else 0


def run(base: Path, chunks: int, workers: int) -> tuple[list[str], str]:
    """Both sections; the problems found and the summary line."""
    reset_process_lru()
    scene = create_scene(base / "inprocess", chunks)
    dispatch = run_messages(scene.rt, scene.messages)
    counts = read_counts(scene.rt)  # the job's figures, before the timings add their hits
    job = _job(scene)
    problems = _check("in-process", counts, 1, job.status, job.error)
    if problems:
        print(f"[in-process] {scene.chunks} chunks, 1 process: job {job.status}")
        print(_counts_line(counts, 1))
        return (
            problems,
            f"bench: chunks={scene.chunks} encodes={counts.builds} file_reads={counts.misses} FAILED",
        )
    scratch = base / "scratch"
    scratch.mkdir()
    timings = measure(scene.rt, scene.voice_id, scratch)
    report_inprocess(scene, dispatch, counts, timings)
    summary = (
        f"bench: chunks={scene.chunks} encodes={counts.builds} file_reads={counts.misses} hits={counts.hits} "
        f"hit_ms={timings.hit_ms:.2f} lru_get_us={timings.lru_get_us:.1f} encode_ms={timings.encode_ms:.0f} "
        f"build_ms={timings.build_ms:.0f} encode_over_hit={timings.encode_ms / timings.hit_ms:.0f}x "
        f"rtf={_rtf(job.output_duration or 0.0, dispatch.wall_seconds):.0f}x"
    )
    if workers > 0:
        print()
        celery_scene = create_scene(base / "celery", chunks)
        celery_run = run_with_workers(celery_scene, workers, base / "celery-worker.log")
        celery_counts = read_counts(celery_scene.rt)
        report_workers(celery_run, celery_counts, celery_scene.chunks)
        problems += _check("celery", celery_counts, workers, celery_run.status, celery_run.error)
        summary += (
            f" | workers={workers} encodes={celery_counts.builds} file_reads={celery_counts.misses} "
            f"hits={celery_counts.hits} rtf={_rtf(celery_run.audio_seconds, celery_run.wall_seconds):.0f}x"
        )
    print()
    return problems, summary


if __name__ == "__main__":
    sys.exit(main())
